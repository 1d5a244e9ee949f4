// The geometry shared by the ISA-specific convolution kernels (src/conv.cpp: AVX-512 and
// the Python binding; src/conv_avx2.cpp: AVX2 + FMA).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

namespace onnx_light_conv {

struct Shape {
    int64_t n, c, h, w;      // input
    int64_t m, kh, kw;       // weights (m, c / group, kh, kw)
    int64_t sh, sw, dh, dw;  // strides, dilations
    int64_t pt, pl;          // begin pads (end pads only shape oh, ow)
    int64_t oh, ow, group;
};

// packed[(mb * K + k) * mr + r] = w[mb*mr + r, k] for the mg x K weights of one group,
// zero for rows past mg: the row blocks the register tiles broadcast from.
inline void pack_weights(const float *w, int64_t mg, int64_t K, int64_t mr, float *packed) {
    for (int64_t mb = 0; mb * mr < mg; ++mb)
        for (int64_t k = 0; k < K; ++k)
            for (int64_t r = 0; r < mr; ++r) {
                const int64_t m = mb * mr + r;
                packed[(mb * K + k) * mr + r] = m < mg ? w[m * K + k] : 0.0f;
            }
}

// `planes` input planes copied into the middle of a zero-bordered buffer (the borders
// are zeroed once and never written), tall enough for every window row and at least
// `width` wide, so that kernels read whole vectors with no bounds checks. Without pads
// and extra width (and unless `always`) the planes are read where they are.
struct PaddedPlanes {
    int64_t hp, wp;
    bool copies;
    std::unique_ptr<float[]> buf;
    PaddedPlanes(const Shape &s, int64_t planes, int64_t width, bool always = false)
        : hp(std::max(s.pt + s.h, (s.oh - 1) * s.sh + (s.kh - 1) * s.dh + 1)),
          wp(std::max(s.pl + s.w, width)),
          copies(always || hp != s.h || wp != s.w || s.pt || s.pl),
          buf(copies ? new float[planes * hp * wp]() : nullptr) {}
    // the planes from x (planes x h x w), as rows of wp floats
    const float *fill(const Shape &s, const float *x, int64_t planes) {
        if (!copies) return x;
        for (int64_t c = 0; c < planes; ++c)
            for (int64_t i = 0; i < s.h; ++i)
                std::memcpy(buf.get() + (c * hp + i + s.pt) * wp + s.pl, x + (c * s.h + i) * s.w, sizeof(float) * s.w);
        return buf.get();
    }
    // offset of weight row k = (c, a, b) in the filled planes, relative to the output pixel
    void tap_offsets(const Shape &s, int64_t K, int64_t *koff) const {
        const int64_t kk = s.kh * s.kw;
        for (int64_t k = 0; k < K; ++k)
            koff[k] = (k / kk) * hp * wp + ((k % kk) / s.kw) * s.dh * wp + (k % s.kw) * s.dw;
    }
};

// y = Conv(x, w, bias) (+ ReLU) for float32 NCHW; y holds n * m * oh * ow floats.
void run_avx512(const Shape &s, const float *x, const float *w, const float *bias, bool relu, float *y);
void run_avx2(const Shape &s, const float *x, const float *w, const float *bias, bool relu, float *y);

}  // namespace onnx_light_conv
