// numpy's pairwise summation of a contiguous float32 row, in its order exactly (eight running
// lane sums up to 128 values, halved at multiples of 8 above), so that a native mean is
// bitwise numpy's np.add.reduce divided by the count (pool.cpp's GlobalAveragePool,
// elementwise.cpp's LayerNormalization). Compiled without FMA: sums only, no contraction.
#pragma once

#include <cstdint>

inline float pairwise_sum(const float *a, int64_t n) {
    if (n < 8) {
        float res = 0.f;
        for (int64_t i = 0; i < n; ++i) res += a[i];
        return res;
    }
    if (n <= 128) {
        float r[8];
        for (int k = 0; k < 8; ++k) r[k] = a[k];
        int64_t i = 8;
        for (; i < n - (n % 8); i += 8)
            for (int k = 0; k < 8; ++k) r[k] += a[i + k];
        float res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; ++i) res += a[i];
        return res;
    }
    int64_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}
