// A squeeze-excite block in one call (MobileNetV3, EfficientNet): per sample n and channel c,
//     s = mean(x[n, c, :, :]);  h = act1(W1 s + b1);  g = act2(W2 h + b2);  y[n, c] = x[n, c] * g[c]
// with W1 (R x C) and W2 (C x R) the weights of the block's two 1 x 1 convolutions and act1 /
// act2 codes of src/conv.h (Relu, HardSigmoid, Sigmoid, ...). The runtime runs GlobalAveragePool
// -> Conv -> act -> Conv -> act -> Mul as this one step (runtime/_fuse.py) instead of six, whose
// small kernels cost more in calls and cold caches than in arithmetic; its numpy twin is those
// six kernels one after the other (the same values up to float rounding: the mean and the dot
// products are summed in another order). AVX2 + FMA (the CPUs the native convolution needs).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

#include "conv.h"
#include "simd.h"

namespace nb = nanobind;

namespace onnx_light_conv {
namespace {

using In4 = nb::ndarray<const float, nb::ndim<4>, nb::c_contig, nb::device::cpu>;
using In2 = nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using In1 = nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Out4 = nb::ndarray<nb::numpy, float, nb::ndim<4>>;
using OutBuf = nb::ndarray<float, nb::ndim<4>, nb::c_contig, nb::device::cpu>;

#if ONNX_LIGHT_AVX512
AVX2 inline float hsum(__m256 v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

// sum of v[0:n]: four 8-lane partial sums, then the tail
AVX2 float sum(const float *v, int64_t n) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; ++k) acc[k] = _mm256_add_ps(acc[k], _mm256_loadu_ps(v + i + 8 * k));
    for (; i + 8 <= n; i += 8) acc[0] = _mm256_add_ps(acc[0], _mm256_loadu_ps(v + i));
    float total = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; ++i) total += v[i];
    return total;
}

// out[r] = bias[r] + sum_k W[r, k] v[k] for r < rows (W rows x cols, row-major; bias may be null)
AVX2 void matvec(const float *W, const float *v, int64_t rows, int64_t cols, const float *bias, float *out) {
    for (int64_t r = 0; r < rows; ++r) {
        const float *row = W + r * cols;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        int64_t k = 0;
        for (; k + 16 <= cols; k += 16) {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(row + k), _mm256_loadu_ps(v + k), a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(row + k + 8), _mm256_loadu_ps(v + k + 8), a1);
        }
        for (; k + 8 <= cols; k += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(row + k), _mm256_loadu_ps(v + k), a0);
        float total = hsum(_mm256_add_ps(a0, a1));
        for (; k < cols; ++k) total += row[k] * v[k];
        out[r] = (bias ? bias[r] : 0.0f) + total;
    }
}

// y[0:n] = x[0:n] * g
AVX2 void scale(const float *x, float g, int64_t n, float *y) {
    const __m256 gv = _mm256_set1_ps(g);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), gv));
    for (; i < n; ++i) y[i] = x[i] * g;
}

// The block for every sample of x (N x C x P floats) into y
AVX2 void squeeze_excite_run(const float *x, int64_t N, int64_t C, int64_t P, const float *w1, const float *b1,
                             const Epilogue &ep1, int64_t R, const float *w2, const float *b2, const Epilogue &ep2,
                             float *y) {
    std::vector<float> s(C), h(R), g(C);
    for (int64_t n = 0; n < N; ++n) {
        const float *xn = x + n * C * P;
        for (int64_t c = 0; c < C; ++c) s[c] = sum(xn + c * P, P) / static_cast<float>(P);
        matvec(w1, s.data(), R, C, b1, h.data());
        epilogue_avx2(ep1, h.data(), nullptr, R);
        matvec(w2, h.data(), C, R, b2, g.data());
        epilogue_avx2(ep2, g.data(), nullptr, C);
        for (int64_t c = 0; c < C; ++c) scale(xn + c * P, g[c], P, y + (n * C + c) * P);
    }
}
#endif

Epilogue activation(int act, float a, float b) {
    if (act < ACT_NONE || act > ACT_SIGMOID) throw std::invalid_argument("squeeze_excite: unknown activation");
    Epilogue ep;
    ep.act = act, ep.a = a, ep.b = b;
    return ep;
}

nb::object squeeze_excite(In4 x, In2 w1, std::optional<In1> b1, int act1, float a1, float c1, In2 w2,
                          std::optional<In1> b2, int act2, float a2, float c2, nb::handle out) {
    if (!has_avx2_fma()) throw std::invalid_argument("squeeze_excite: this CPU has no AVX2 + FMA");
    const int64_t N = x.shape(0), C = x.shape(1), P = x.shape(2) * x.shape(3), R = w1.shape(0);
    if (static_cast<int64_t>(w1.shape(1)) != C || static_cast<int64_t>(w2.shape(0)) != C ||
        static_cast<int64_t>(w2.shape(1)) != R)
        throw std::invalid_argument("squeeze_excite: the weights are not R x C and C x R");
    if ((b1 && static_cast<int64_t>(b1->shape(0)) != R) || (b2 && static_cast<int64_t>(b2->shape(0)) != C))
        throw std::invalid_argument("squeeze_excite: a bias does not match its weights");
    if (P == 0) throw std::invalid_argument("squeeze_excite: an empty spatial map has no mean");
    const Epilogue ep1 = activation(act1, a1, c1), ep2 = activation(act2, a2, c2);
    const float *bias1 = b1 ? b1->data() : nullptr, *bias2 = b2 ? b2->data() : nullptr;
    OutBuf lent;
    const bool into = out.is_valid() && !out.is_none() && nb::try_cast(out, lent, false) && lent.shape(0) == x.shape(0) &&
                      lent.shape(1) == x.shape(1) && lent.shape(2) == x.shape(2) && lent.shape(3) == x.shape(3) &&
                      (lent.data() + lent.size() <= x.data() || x.data() + x.size() <= lent.data());
    std::unique_ptr<float[]> owned(into ? nullptr : new float[std::max<size_t>(1, x.size())]);
    float *y = into ? lent.data() : owned.get();
#if ONNX_LIGHT_AVX512
    {
        nb::gil_scoped_release release;
        squeeze_excite_run(x.data(), N, C, P, w1.data(), bias1, ep1, R, w2.data(), bias2, ep2, y);
    }
#endif
    if (into) return nb::borrow(out);
    nb::capsule owner(y, [](void *ptr) noexcept { delete[] static_cast<float *>(ptr); });
    owned.release();
    return nb::cast(Out4(y, {x.shape(0), x.shape(1), x.shape(2), x.shape(3)}, owner));
}

}  // namespace
}  // namespace onnx_light_conv

void bind_squeeze_excite(nb::module_ &m) {
    m.def("squeeze_excite", &onnx_light_conv::squeeze_excite, nb::arg("x"), nb::arg("w1"), nb::arg("b1").none(),
          nb::arg("act1"), nb::arg("a1"), nb::arg("c1"), nb::arg("w2"), nb::arg("b2").none(), nb::arg("act2"),
          nb::arg("a2"), nb::arg("c2"), nb::arg("out").none() = nb::none(),
          "x * act2(W2 act1(W1 mean(x) + b1) + b2) per sample and channel (float32 N x C x H x W; "
          "W1 R x C, W2 C x R): written into `out` when it is a writeable C-contiguous float32 array "
          "of x's shape that does not overlap x, else a new array");
}
