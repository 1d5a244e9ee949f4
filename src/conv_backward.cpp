// The loops of a convolution's backward that numpy does poorly (float32).
//
// conv_transpose_weights: a transposed convolution of stride 1 is the convolution of its input
// with its weights (C, M/g, kh, kw) flipped along both spatial axes and with the two channel
// axes swapped per group, (M, C/g, kh, kw):
//     flipped[g*Mg + m, c, a, b] = w[g*Cg + c, m, kh-1-a, kw-1-b]
// (reversing both spatial axes reverses the kh*kw taps read as one flat run). numpy's copy of
// that transposed view walks the destination in order and reads 9 floats from each source row
// it jumps to (7-15 ms for 512 x 512 x 3 x 3, as long as the convolution itself); here both the
// reads and the writes go in blocks of 16 x 16 channel pairs, runs of 16 * kh * kw floats on
// both sides (~1 ms). The pure-Python twin is conv_transpose_weights_twin in
// onnx_light/runtime/kernels/_conv_backward.py.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>

namespace nb = nanobind;

namespace onnx_light_conv_backward {
namespace {

using In4 = nb::ndarray<const float, nb::ndim<4>, nb::c_contig, nb::device::cpu>;
using Out4 = nb::ndarray<nb::numpy, float, nb::ndim<4>>;

constexpr int64_t BLOCK = 16;  // channel pairs per block side

// out (group*Mg, Cg, K) from w (group*Cg, Mg, K) as in the header, K = kh * kw
void flip_weights(const float *w, int64_t group, int64_t Cg, int64_t Mg, int64_t K, float *out) {
    for (int64_t g = 0; g < group; ++g) {
        const float *wg = w + g * Cg * Mg * K;
        float *og = out + g * Mg * Cg * K;
        for (int64_t m0 = 0; m0 < Mg; m0 += BLOCK) {
            const int64_t m1 = std::min(Mg, m0 + BLOCK);
            for (int64_t c0 = 0; c0 < Cg; c0 += BLOCK) {
                const int64_t c1 = std::min(Cg, c0 + BLOCK);
                for (int64_t m = m0; m < m1; ++m) {
                    float *dst = og + (m * Cg + c0) * K;
                    for (int64_t c = c0; c < c1; ++c, dst += K) {
                        const float *src = wg + (c * Mg + m) * K;
                        for (int64_t t = 0; t < K; ++t) dst[t] = src[K - 1 - t];
                    }
                }
            }
        }
    }
}

using OutBuf = nb::ndarray<float, nb::ndim<4>, nb::c_contig, nb::device::cpu>;

// `out`: a writeable C-contiguous float32 array of the result's shape that does not overlap w
// (the caller's scratch: a fresh array of weights' size costs its page faults, ~2-4 ms for
// 512 x 512 x 3 x 3), written and returned; None: a new array
nb::object conv_transpose_weights(In4 w, int64_t group, nb::handle out) {
    const int64_t C = w.shape(0), Mg = w.shape(1), kh = w.shape(2), kw = w.shape(3);
    if (group <= 0 || C % group)
        throw std::invalid_argument("conv_transpose_weights: the input channels are not a multiple of group");
    const int64_t Cg = C / group, K = kh * kw, total = C * Mg * K;
    if (out.is_valid() && !out.is_none()) {
        OutBuf lent;
        if (!nb::try_cast(out, lent, false) || static_cast<int64_t>(lent.shape(0)) != group * Mg ||
            static_cast<int64_t>(lent.shape(1)) != Cg || static_cast<int64_t>(lent.shape(2)) != kh ||
            static_cast<int64_t>(lent.shape(3)) != kw)
            throw std::invalid_argument("conv_transpose_weights: out is not a writeable float32 (M, C/g, kh, kw) array");
        const auto lo = reinterpret_cast<uintptr_t>(lent.data()), a = reinterpret_cast<uintptr_t>(w.data());
        if (total && lo < a + total * sizeof(float) && a < lo + total * sizeof(float))
            throw std::invalid_argument("conv_transpose_weights: out overlaps w");
        {
            nb::gil_scoped_release release;
            flip_weights(w.data(), group, Cg, Mg, K, lent.data());
        }
        return nb::borrow(out);
    }
    std::unique_ptr<float[]> out_owned(new float[total ? total : 1]);
    {
        nb::gil_scoped_release release;
        flip_weights(w.data(), group, Cg, Mg, K, out_owned.get());
    }
    nb::capsule owner(out_owned.get(), [](void *ptr) noexcept { delete[] static_cast<float *>(ptr); });
    float *data = out_owned.release();
    return nb::cast(Out4(data,
                {static_cast<size_t>(group * Mg), static_cast<size_t>(Cg), static_cast<size_t>(kh),
                 static_cast<size_t>(kw)},
                owner));
}

}  // namespace
}  // namespace onnx_light_conv_backward

void bind_conv_backward(nb::module_ &m) {
    using namespace onnx_light_conv_backward;
    m.def("conv_transpose_weights", &conv_transpose_weights, nb::arg("w"), nb::arg("group"),
          nb::arg("out").none() = nb::none(),
          "ConvTranspose weights (C, M/g, kh, kw) as the weights (M, C/g, kh, kw) of the stride-1 convolution it "
          "equals: channel axes swapped per group, both spatial axes flipped (float32); written into `out` (and "
          "`out` returned) when given");
}
