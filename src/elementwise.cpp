// Float32 element-wise loops numpy runs as several passes with temporaries: Sigmoid
// (negative, exp, add, divide) and Softmax over rows (max, subtract, exp, sum, divide),
// here one pass (two for Softmax) with an AVX2 exp; LayerNormalization over rows in numpy's
// own order of operations (pairwise sums, no fused multiply-adds: bitwise its twin); Where as
// one select per element (numpy's where with a broadcast branch takes ~6x longer). Twins:
// onnx_light/runtime/_native.py.
//
// exp(x) = 2^n * exp(r), n = round(x / ln 2), r = x - n ln 2 (ln 2 split in two parts so the
// product is exact), exp(r) on [-ln2/2, ln2/2] by Cephes' degree-6 polynomial (within 2 ulp
// of the correctly rounded value), 2^n applied in two halves so that results below
// FLT_MIN come out denormal and above FLT_MAX infinite, as numpy's exp gives them; NaN gives NaN.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "pairwise.h"
#include "pointwise_compiled.h"
#include "simd.h"
#include "thread_pool.h"

namespace nb = nanobind;

namespace {

using InF = nb::ndarray<const float, nb::c_contig, nb::device::cpu>;
using OutF = nb::ndarray<float, nb::c_contig, nb::device::cpu>;
using In2 = nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using Out2 = nb::ndarray<float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

#if ONNX_LIGHT_AVX512
AVX2 inline __m256 exp8(__m256 x) {
    const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    __m256 v = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-104.0f)), _mm256_set1_ps(89.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(v, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), v);
    v = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), v);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, v, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, v, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, v, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, v, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, v, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, v), v, _mm256_add_ps(v, _mm256_set1_ps(1.0f)));
    // 2^n as 2^h * 2^(n - h), h = n / 2 (truncated): each factor a normal float for n in [-150, 128]
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i hi = _mm256_srai_epi32(ni, 1);
    const __m256i lo = _mm256_sub_epi32(ni, hi);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(hi, bias), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(lo, bias), 23));
    p = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    // a NaN comes out as the positive quiet NaN, whatever its sign and payload (as numpy's exp gives it)
    return _mm256_blendv_ps(p, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)), nan);
}

AVX2 inline __m256 max_nan8(__m256 a, __m256 b) {
    const __m256 m = _mm256_max_ps(b, a);  // a where either is NaN
    return _mm256_blendv_ps(m, b, _mm256_cmp_ps(b, b, _CMP_UNORD_Q));
}

// The last n % 8 elements go through a local 8-float block: whole-vector loads and stores
// only (masked stores are microcoded on some x86 cores and would cost more than the math).
struct Tail {
    alignas(32) float buf[8];
    int64_t count;
    const float *load(const float *src, int64_t count_, float fill) {
        count = count_;
        for (int k = 0; k < 8; ++k) buf[k] = k < count ? src[k] : fill;
        return buf;
    }
    void store(float *dst) const {
        for (int64_t k = 0; k < count; ++k) dst[k] = buf[k];
    }
};

AVX2 inline __m256 sigmoid8(__m256 v) {
    // -x by flipping the sign bit, as numpy's negative does
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 e = exp8(_mm256_xor_ps(v, _mm256_set1_ps(-0.0f)));
    return _mm256_div_ps(one, _mm256_add_ps(one, e));
}

AVX2 void sigmoid_avx2(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, sigmoid8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        Tail t;
        _mm256_store_ps(t.buf, sigmoid8(_mm256_load_ps(t.load(x + i, n - i, 0.0f))));
        t.store(y + i);
    }
}

AVX2 void softmax_row_avx2(const float *x, float *y, int64_t n) {
    const float lowest = -std::numeric_limits<float>::infinity();
    __m256 m = _mm256_set1_ps(lowest);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) m = max_nan8(m, _mm256_loadu_ps(x + i));
    Tail t;
    if (i < n) m = max_nan8(m, _mm256_load_ps(t.load(x + i, n - i, lowest)));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, m);
    float top = lanes[0];
    for (int k = 1; k < 8; ++k) top = (lanes[k] != lanes[k] || lanes[k] > top) ? lanes[k] : top;
    const __m256 mv = _mm256_set1_ps(top);
    __m256 sum = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) {
        const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
        sum = _mm256_add_ps(sum, e);
        _mm256_storeu_ps(y + i, e);
    }
    float total = 0.0f;
    if (i < n) {
        // the tail's exp, summed only over its real elements
        _mm256_store_ps(t.buf, exp8(_mm256_sub_ps(_mm256_load_ps(t.load(x + i, n - i, 0.0f)), mv)));
        for (int64_t k = 0; k < t.count; ++k) total += t.buf[k];
        t.store(y + i);
    }
    _mm256_store_ps(lanes, sum);
    for (int k = 0; k < 8; ++k) total += lanes[k];
    const __m256 tv = _mm256_set1_ps(total);
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_div_ps(_mm256_loadu_ps(y + i), tv));
    for (; i < n; ++i) y[i] /= total;
}
#endif

void sigmoid_scalar(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + std::exp(-x[i]));
}

void softmax_row_scalar(const float *x, float *y, int64_t n) {
    float top = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < n; ++i) top = (x[i] != x[i] || x[i] > top) ? x[i] : top;
    float total = 0.0f;
    for (int64_t i = 0; i < n; ++i) total += (y[i] = std::exp(x[i] - top));
    for (int64_t i = 0; i < n; ++i) y[i] /= total;
}

// elements per item of a threaded Sigmoid (a multiple of the vector width: every element
// goes through the same vector code as on one thread)
constexpr int64_t SIGMOID_CHUNK = 16384;

void sigmoid_f32(InF x, OutF y, int threads) {
    if (x.size() != y.size()) throw std::invalid_argument("sigmoid_f32: x and y differ in size");
    if (threads < 1 || threads > 64) throw std::invalid_argument("sigmoid_f32: threads must be in [1, 64]");
    const int64_t n = static_cast<int64_t>(x.size());
    const float *src = x.data();
    float *dst = y.data();
    nb::gil_scoped_release release;
    bool simd = false;
#if ONNX_LIGHT_AVX512
    simd = has_avx2_fma();
#endif
    onnx_light_pool::parallel_items(threads, (n + SIGMOID_CHUNK - 1) / SIGMOID_CHUNK, [&](int, int64_t i) {
        const int64_t lo = i * SIGMOID_CHUNK, len = std::min(SIGMOID_CHUNK, n - lo);
#if ONNX_LIGHT_AVX512
        if (simd) return sigmoid_avx2(src + lo, dst + lo, len);
#endif
        (void)simd;
        sigmoid_scalar(src + lo, dst + lo, len);
    });
}

void softmax_rows_f32(In2 x, Out2 y, int threads) {
    if (x.shape(0) != y.shape(0) || x.shape(1) != y.shape(1))
        throw std::invalid_argument("softmax_rows_f32: x and y differ in shape");
    if (threads < 1 || threads > 64) throw std::invalid_argument("softmax_rows_f32: threads must be in [1, 64]");
    const int64_t rows = static_cast<int64_t>(x.shape(0)), n = static_cast<int64_t>(x.shape(1));
    const float *src = x.data();
    float *dst = y.data();
    nb::gil_scoped_release release;
    bool simd = false;
#if ONNX_LIGHT_AVX512
    simd = has_avx2_fma();
#endif
    // items of whole rows, about SIGMOID_CHUNK elements each
    const int64_t per = std::max<int64_t>(1, SIGMOID_CHUNK / std::max<int64_t>(n, 1));
    onnx_light_pool::parallel_items(threads, (rows + per - 1) / per, [&](int, int64_t i) {
        for (int64_t r = i * per; r < std::min(rows, (i + 1) * per); ++r) {
#if ONNX_LIGHT_AVX512
            if (simd) {
                softmax_row_avx2(src + r * n, dst + r * n, n);
                continue;
            }
#endif
            (void)simd;
            softmax_row_scalar(src + r * n, dst + r * n, n);
        }
    });
}


using In1 = nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// Per row of x (rows, n): mean = sum / n, c = x - mean, var = sum(c * c) / n,
// y = c * (1 / sqrt(var + eps)) * scale (+ bias), each step rounded to float32 as numpy's
// passes round it (plain SSE code: nothing is contracted into an FMA); with ``mean_out`` and
// ``inv_std_out`` (one value per row) each row's mean and 1 / sqrt(var + eps) too
void layer_norm_rows(const float *src, const float *s, const float *b, bool has_bias, float eps, float *dst,
                     int64_t rows, int64_t n, float *mean_out, float *inv_std_out) {
    const float count = static_cast<float>(n);
    std::vector<float> square(static_cast<size_t>(std::max<int64_t>(n, 1)));
    for (int64_t r = 0; r < rows; ++r) {
        const float *xr = src + r * n;
        float *yr = dst + r * n;
        const float mean = pairwise_sum(xr, n) / count;
        for (int64_t j = 0; j < n; ++j) {
            const float c = xr[j] - mean;
            yr[j] = c;
            square[j] = c * c;
        }
        const float inv_std = 1.0f / std::sqrt(pairwise_sum(square.data(), n) / count + eps);
        if (mean_out) {
            mean_out[r] = mean;
            inv_std_out[r] = inv_std;
        }
        for (int64_t j = 0; j < n; ++j) {
            const float v = (yr[j] * inv_std) * s[j];
            yr[j] = has_bias ? v + b[j] : v;
        }
    }
}

void layer_norm_rows_f32(In2 x, In1 scale, In1 bias, bool has_bias, float eps, Out2 y) {
    const int64_t rows = static_cast<int64_t>(x.shape(0)), n = static_cast<int64_t>(x.shape(1));
    if (static_cast<int64_t>(scale.shape(0)) != n || static_cast<int64_t>(bias.shape(0)) != n ||
        y.shape(0) != x.shape(0) || y.shape(1) != x.shape(1))
        throw std::invalid_argument("layer_norm_rows_f32: scale and bias must hold one value per column, y be x's shape");
    const float *src = x.data(), *s = scale.data(), *b = bias.data();
    float *dst = y.data();
    nb::gil_scoped_release release;
    layer_norm_rows(src, s, b, has_bias, eps, dst, rows, n, nullptr, nullptr);
}

using Out1 = nb::ndarray<float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

void layer_norm_rows_stats_f32(In2 x, In1 scale, In1 bias, bool has_bias, float eps, Out2 y, Out1 mean, Out1 inv_std) {
    const int64_t rows = static_cast<int64_t>(x.shape(0)), n = static_cast<int64_t>(x.shape(1));
    if (static_cast<int64_t>(scale.shape(0)) != n || static_cast<int64_t>(bias.shape(0)) != n ||
        y.shape(0) != x.shape(0) || y.shape(1) != x.shape(1) || static_cast<int64_t>(mean.shape(0)) != rows ||
        static_cast<int64_t>(inv_std.shape(0)) != rows)
        throw std::invalid_argument(
            "layer_norm_rows_stats_f32: scale and bias must hold one value per column, y be x's shape, mean and "
            "inv_std one value per row");
    const float *src = x.data(), *s = scale.data(), *b = bias.data();
    float *dst = y.data(), *m = mean.data(), *v = inv_std.data();
    nb::gil_scoped_release release;
    layer_norm_rows(src, s, b, has_bias, eps, dst, rows, n, m, v);
}

// A straight-line program of float32 binary/unary operations over arrays of one size (an
// optimizer's update: runtime/_fuse_pointwise.py), run block by block so that every
// intermediate stays in a PW_BLOCK-float buffer instead of a full array. Register r is input r
// (its full array, or its one value broadcast), then output r - inputs, then temporary
// r - inputs - outputs (one block each). The optimizers' own programs run compiled instead
// (src/pointwise_compiled.h), all but the last n % 8 elements, which the blocks then take. Each
// operation is one IEEE float32 operation, correctly rounded as numpy's ufunc gives it, and
// nothing is contracted (each loop holds one operation, the vector loop one intrinsic stored at
// once; this file is built with -ffp-contract=off): the results are bitwise numpy's.
enum PointwiseOp : int32_t { PW_ADD = 0, PW_SUB = 1, PW_MUL = 2, PW_DIV = 3, PW_SQRT = 4 };
constexpr int64_t PW_BLOCK = 256;

template <typename F>
inline void pw_loop(float *d, const float *a, const float *b, int64_t n, F f) {
    for (int64_t i = 0; i < n; ++i) d[i] = f(a[i], b[i]);
}

void pw_run_scalar(int32_t op, float *d, const float *a, const float *b, int64_t n) {
    switch (op) {
        case PW_ADD: return pw_loop(d, a, b, n, [](float x, float y) { return x + y; });
        case PW_SUB: return pw_loop(d, a, b, n, [](float x, float y) { return x - y; });
        case PW_MUL: return pw_loop(d, a, b, n, [](float x, float y) { return x * y; });
        case PW_DIV: return pw_loop(d, a, b, n, [](float x, float y) { return x / y; });
        default: return pw_loop(d, a, a, n, [](float x, float) { return std::sqrt(x); });
    }
}

#if ONNX_LIGHT_AVX512
// one intrinsic per vector (nothing to contract), the last n % 8 elements by the scalar loop
#define PW_AVX2_LOOP(EXPR)                                          \
    for (; i + 8 <= n; i += 8) {                                    \
        const __m256 x = _mm256_loadu_ps(a + i);                    \
        const __m256 y = _mm256_loadu_ps(b + i);                    \
        (void)y;                                                    \
        _mm256_storeu_ps(d + i, EXPR);                              \
    }
AVX2 void pw_run_avx2(int32_t op, float *d, const float *a, const float *b, int64_t n) {
    int64_t i = 0;
    switch (op) {
        case PW_ADD: PW_AVX2_LOOP(_mm256_add_ps(x, y)) break;
        case PW_SUB: PW_AVX2_LOOP(_mm256_sub_ps(x, y)) break;
        case PW_MUL: PW_AVX2_LOOP(_mm256_mul_ps(x, y)) break;
        case PW_DIV: PW_AVX2_LOOP(_mm256_div_ps(x, y)) break;
        default: PW_AVX2_LOOP(_mm256_sqrt_ps(x)) break;
    }
    if (i < n) pw_run_scalar(op, d + i, a + i, b + i, n - i);
}
#undef PW_AVX2_LOOP
#endif

void pointwise_f32(std::vector<InF> inputs, std::vector<OutF> outputs, nb::ndarray<const int32_t, nb::ndim<2>, nb::c_contig, nb::device::cpu> code,
                   int64_t temps) {
    const int64_t nin = static_cast<int64_t>(inputs.size()), nout = static_cast<int64_t>(outputs.size());
    if (nout < 1 || code.shape(1) != 4 || temps < 0 || temps > 1024)
        throw std::invalid_argument("pointwise_f32: needs outputs, a (k, 4) program and at most 1024 temporaries");
    const int64_t n = static_cast<int64_t>(outputs[0].size()), regs = nin + nout + temps;
    for (const auto &o : outputs)
        if (static_cast<int64_t>(o.size()) != n) throw std::invalid_argument("pointwise_f32: outputs differ in size");
    for (const auto &x : inputs)
        if (static_cast<int64_t>(x.size()) != n && x.size() != 1)
            throw std::invalid_argument("pointwise_f32: an input is neither the outputs' size nor one value");
    const int64_t k = static_cast<int64_t>(code.shape(0));
    const int32_t *prog = code.data();
    for (int64_t j = 0; j < k; ++j) {
        const int32_t *c = prog + 4 * j;
        if (c[0] < PW_ADD || c[0] > PW_SQRT || c[1] < nin || c[1] >= regs || c[2] < 0 || c[2] >= regs || c[3] < 0 ||
            c[3] >= regs)
            throw std::invalid_argument("pointwise_f32: an instruction names an unknown operation or register");
    }
    std::vector<const float *> in_ptr(nin);
    std::vector<float *> out_ptr(nout);
    for (int64_t r = 0; r < nin; ++r) in_ptr[r] = inputs[r].data();
    for (int64_t r = 0; r < nout; ++r) out_ptr[r] = outputs[r].data();
    std::vector<bool> scalar(nin);
    for (int64_t r = 0; r < nin; ++r) scalar[r] = inputs[r].size() == 1 && n != 1;
    nb::gil_scoped_release release;
    // one block per broadcast input (its value repeated) and per temporary
    std::vector<float> buf(static_cast<size_t>((nin + temps) * PW_BLOCK));
    for (int64_t r = 0; r < nin; ++r)
        if (scalar[r]) std::fill_n(buf.data() + r * PW_BLOCK, PW_BLOCK, in_ptr[r][0]);
    float *tmp = buf.data() + nin * PW_BLOCK;
    bool simd = false;
#if ONNX_LIGHT_AVX512
    simd = has_avx2_fma();
#endif
    int64_t start = 0;
    uint64_t singles = 0;
    for (int64_t r = 0; r < nin && r < 64; ++r) singles |= uint64_t{scalar[r]} << r;
    // (a table's program has at most 12 inputs: one of more than 64 matches none)
    const pw_compiled::Program *compiled = simd ? pw_compiled::find(prog, k, nin, nout, temps, singles) : nullptr;
    if (compiled && n >= 8) {
        start = n - n % 8;
        compiled->run(in_ptr.data(), out_ptr.data(), start);
    }
    std::vector<float *> ptr(regs);
    for (int64_t lo = start; lo < n; lo += PW_BLOCK) {
        const int64_t len = std::min(PW_BLOCK, n - lo);
        for (int64_t r = 0; r < nin; ++r)
            ptr[r] = scalar[r] ? buf.data() + r * PW_BLOCK : const_cast<float *>(in_ptr[r]) + lo;
        for (int64_t r = 0; r < nout; ++r) ptr[nin + r] = out_ptr[r] + lo;
        for (int64_t r = 0; r < temps; ++r) ptr[nin + nout + r] = tmp + r * PW_BLOCK;
        for (int64_t j = 0; j < k; ++j) {
            const int32_t *c = prog + 4 * j;
#if ONNX_LIGHT_AVX512
            if (simd) {
                pw_run_avx2(c[0], ptr[c[1]], ptr[c[2]], ptr[c[3]], len);
                continue;
            }
#endif
            (void)simd;
            pw_run_scalar(c[0], ptr[c[1]], ptr[c[2]], ptr[c[3]], len);
        }
    }
}

// whether pointwise_f32 runs this program compiled (on this CPU) when the inputs ``singles``
// (a bit each) are one value
bool pointwise_compiled(nb::ndarray<const int32_t, nb::ndim<2>, nb::c_contig, nb::device::cpu> code, int64_t inputs,
                        int64_t outputs, int64_t temps, uint64_t singles) {
    if (code.shape(1) != 4) throw std::invalid_argument("pointwise_compiled: needs a (k, 4) program");
    bool simd = false;
#if ONNX_LIGHT_AVX512
    simd = has_avx2_fma();
#endif
    return simd && pw_compiled::find(code.data(), static_cast<int64_t>(code.shape(0)), inputs, outputs, temps, singles);
}

using InB = nb::ndarray<const bool, nb::c_contig, nb::device::cpu>;

#if ONNX_LIGHT_AVX512
// 8 conditions (bytes 0 or 1) widened to lane masks, then one blend per vector
AVX2 void where_avx2(const bool *c, const float *x, int64_t sx, const float *y, int64_t sy, float *d, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        int64_t bytes;
        std::memcpy(&bytes, c + i, 8);
        const __m256i wide = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(bytes));
        const __m256 m = _mm256_castsi256_ps(_mm256_cmpgt_epi32(wide, _mm256_setzero_si256()));
        const __m256 a = sx ? _mm256_loadu_ps(x + i) : _mm256_set1_ps(x[0]);
        const __m256 b = sy ? _mm256_loadu_ps(y + i) : _mm256_set1_ps(y[0]);
        _mm256_storeu_ps(d + i, _mm256_blendv_ps(b, a, m));
    }
    for (; i < n; ++i) d[i] = c[i] ? x[i * sx] : y[i * sy];
}
#endif

// ONNX Where on float32: d = c ? x : y, x and y each either of d's size or one value
void where_f32(InB cond, InF x, InF y, OutF out) {
    const int64_t n = static_cast<int64_t>(out.size());
    if (static_cast<int64_t>(cond.size()) != n) throw std::invalid_argument("where_f32: cond and out differ in size");
    for (const auto *v : {&x, &y})
        if (static_cast<int64_t>(v->size()) != n && v->size() != 1)
            throw std::invalid_argument("where_f32: x and y must be out's size or one value");
    const int64_t sx = static_cast<int64_t>(x.size()) == n ? 1 : 0, sy = static_cast<int64_t>(y.size()) == n ? 1 : 0;
    const bool *c = cond.data();
    const float *a = x.data(), *b = y.data();
    float *d = out.data();
    nb::gil_scoped_release release;
#if ONNX_LIGHT_AVX512
    if (has_avx2_fma()) return where_avx2(c, a, sx, b, sy, d, n);
#endif
    for (int64_t i = 0; i < n; ++i) d[i] = c[i] ? a[i * sx] : b[i * sy];
}

}  // namespace

void bind_elementwise(nb::module_ &m) {
    m.def("pointwise_f32", &pointwise_f32, nb::arg("inputs"), nb::arg("outputs"), nb::arg("code"), nb::arg("temps"));
    m.def("pointwise_compiled", &pointwise_compiled, nb::arg("code"), nb::arg("inputs"), nb::arg("outputs"),
          nb::arg("temps"), nb::arg("singles"));
    m.def("where_f32", &where_f32, nb::arg("cond"), nb::arg("x"), nb::arg("y"), nb::arg("out"));
    m.def("sigmoid_f32", &sigmoid_f32, nb::arg("x"), nb::arg("y"), nb::arg("threads") = 1);
    m.def("softmax_rows_f32", &softmax_rows_f32, nb::arg("x"), nb::arg("y"), nb::arg("threads") = 1);
    m.def("layer_norm_rows_f32", &layer_norm_rows_f32, nb::arg("x"), nb::arg("scale"), nb::arg("bias"),
          nb::arg("has_bias"), nb::arg("eps"), nb::arg("y"));
    m.def("layer_norm_rows_stats_f32", &layer_norm_rows_stats_f32, nb::arg("x"), nb::arg("scale"), nb::arg("bias"),
          nb::arg("has_bias"), nb::arg("eps"), nb::arg("y"), nb::arg("mean"), nb::arg("inv_std"));
}
