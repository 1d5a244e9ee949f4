// The geometry shared by the ISA-specific convolution kernels (src/conv.cpp: AVX-512 and
// the Python binding; src/conv_avx2.cpp: AVX2 + FMA).
#pragma once

#include <cstdint>

namespace onnx_light_conv {

struct Shape {
    int64_t n, c, h, w;      // input
    int64_t m, kh, kw;       // weights (m, c / group, kh, kw)
    int64_t sh, sw, dh, dw;  // strides, dilations
    int64_t pt, pl;          // begin pads (end pads only shape oh, ow)
    int64_t oh, ow, group;
};

// y = Conv(x, w, bias) (+ ReLU) for float32 NCHW; y holds n * m * oh * ow floats.
void run_avx512(const Shape &s, const float *x, const float *w, const float *bias, bool relu, float *y);
void run_avx2(const Shape &s, const float *x, const float *w, const float *bias, bool relu, float *y);

}  // namespace onnx_light_conv
