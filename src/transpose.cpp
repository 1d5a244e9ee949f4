// transpose_rows_f32: the last two axes of a C-contiguous float32 (batch, rows, cols) array
// swapped into a new C-contiguous (batch, cols, rows) one, in 8 x 8 AVX2 blocks (8 loads, 24
// shuffles, 8 stores) so that both the reads and the writes stay within a few cache lines (numpy's strided copy of a transposed view
// reads one float per cache line: yolo's detection heads Reshape such views, 0.8-1.1 ms a run).
// A plain copy: the twin is numpy's np.ascontiguousarray(x.swapaxes(-1, -2))
// (runtime/kernels/shape.py), bit for bit. With `threads`, the output's row bands (COL_BAND
// source columns of one plane each) go to the pool (src/thread_pool.h): each element is still
// one load and one store, so any split gives the same bits.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>

#include "simd.h"
#include "thread_pool.h"

namespace nb = nanobind;

namespace {

using In3f = nb::ndarray<const float, nb::ndim<3>, nb::c_contig, nb::device::cpu>;
using Out3f = nb::ndarray<nb::numpy, float, nb::ndim<3>>;

// source columns per work item: 64 columns x 85 rows (yolo's heads) is 22 KB read and written
constexpr int64_t COL_BAND = 64;

// dst[j * rows + a] = src[a * cols + j] for the source columns j0 <= j < j1 (every row a)
void transpose_plane_scalar(const float *src, int64_t rows, int64_t cols, int64_t j0, int64_t j1, float *dst) {
    for (int64_t a = 0; a < rows; ++a)
        for (int64_t j = j0; j < j1; ++j) dst[j * rows + a] = src[a * cols + j];
}

#if ONNX_LIGHT_AVX512  // x86 with GCC/Clang
// dst[j * ldd + i] = src[i * lds + j] for i, j < 8: an 8 x 8 block by 24 shuffles
AVX2 inline void block8(const float *src, int64_t lds, float *dst, int64_t ldd) {
    __m256 r[8], t[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * lds);
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);      // a0 b0 a1 b1 | a4 b4 a5 b5
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);  // a2 b2 a3 b3 | a6 b6 a7 b7
    }
    for (int i = 0; i < 8; i += 4)
        for (int h = 0; h < 2; ++h) {
            r[i + 2 * h] = _mm256_shuffle_ps(t[i + h], t[i + 2 + h], _MM_SHUFFLE(1, 0, 1, 0));
            r[i + 2 * h + 1] = _mm256_shuffle_ps(t[i + h], t[i + 2 + h], _MM_SHUFFLE(3, 2, 3, 2));
        }
    // r[0..3]: columns 0, 1, 2, 3 of rows 0-3 (low half) and 4, 5, 6, 7 (high half); r[4..7]: rows 4-7
    for (int c = 0; c < 4; ++c) {
        _mm256_storeu_ps(dst + c * ldd, _mm256_permute2f128_ps(r[c], r[c + 4], 0x20));
        _mm256_storeu_ps(dst + (c + 4) * ldd, _mm256_permute2f128_ps(r[c], r[c + 4], 0x31));
    }
}

// columns j0 <= j < j1 of src (rows x cols) as rows of dst (cols x rows): 8 x 8 blocks, scalar edges
AVX2 void transpose_plane(const float *src, int64_t rows, int64_t cols, int64_t j0, int64_t j1, float *dst) {
    const int64_t r8 = rows / 8 * 8, c8 = j0 + (j1 - j0) / 8 * 8;
    for (int64_t i = 0; i < r8; i += 8) {
        for (int64_t j = j0; j < c8; j += 8) block8(src + i * cols + j, cols, dst + j * rows + i, rows);
        for (int64_t j = c8; j < j1; ++j)
            for (int64_t a = i; a < i + 8; ++a) dst[j * rows + a] = src[a * cols + j];
    }
    for (int64_t a = r8; a < rows; ++a)
        for (int64_t j = j0; j < j1; ++j) dst[j * rows + a] = src[a * cols + j];
}

#else
void transpose_plane(const float *src, int64_t rows, int64_t cols, int64_t j0, int64_t j1, float *dst) {
    transpose_plane_scalar(src, rows, cols, j0, j1, dst);
}
#endif

Out3f transpose_rows(In3f x, int threads) {
    if (threads < 1 || threads > 64) throw std::invalid_argument("transpose_rows_f32: threads must be in [1, 64]");
    const int64_t batch = x.shape(0), rows = x.shape(1), cols = x.shape(2), plane = rows * cols;
    std::unique_ptr<float[]> y(new float[std::max<int64_t>(1, batch * plane)]);
    {
        nb::gil_scoped_release release;
        const auto copy = has_avx2_fma() ? transpose_plane : transpose_plane_scalar;
        const int64_t bands = (cols + COL_BAND - 1) / COL_BAND;
        const float *src = x.data();
        float *dst = y.get();
        onnx_light_pool::parallel_items(threads, batch * bands, [&](int, int64_t item) {
            const int64_t b = item / bands, j0 = item % bands * COL_BAND;
            copy(src + b * plane, rows, cols, j0, std::min(cols, j0 + COL_BAND), dst + b * plane);
        });
    }
    nb::capsule owner(y.get(), [](void *ptr) noexcept { delete[] static_cast<float *>(ptr); });
    float *data = y.release();
    return Out3f(data, {static_cast<size_t>(batch), static_cast<size_t>(cols), static_cast<size_t>(rows)}, owner);
}

}  // namespace

void bind_transpose(nb::module_ &m) {
    m.def("transpose_rows_f32", &transpose_rows, nb::arg("x"), nb::arg("threads") = 1,
          "float32 (batch, rows, cols) C-contiguous -> a new C-contiguous (batch, cols, rows): x.swapaxes(1, 2)");
}
