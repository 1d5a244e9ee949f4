// onnx_light._native: the loops numpy does poorly (DESIGN.md section 6).
// Each function has a pure-Python twin with the same signature (pooling:
// onnx_light/runtime/_native.py; codec, src/codec.cpp: onnx_light/onnx_core/_wire.py);
// ONNX_LIGHT_PURE_PYTHON=1 selects the twins.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>


namespace nb = nanobind;

void bind_codec(nb::module_ &m);  // src/codec.cpp: the wire codec's byte loops
void bind_conv(nb::module_ &m);   // src/conv.cpp: 2-D float32 convolution
void bind_conv_backward(nb::module_ &m);  // src/conv_backward.cpp: ConvTranspose weights as a Conv's
void bind_recurrent(nb::module_ &m);  // src/recurrent.cpp: the RNN/GRU/LSTM step loop
void bind_resample(nb::module_ &m);  // src/resample.cpp: Resize / GridSample weighted gathers
void bind_pool(nb::module_ &m);  // src/pool.cpp: separable float32 max pooling
void bind_elementwise(nb::module_ &m);  // src/elementwise.cpp: Sigmoid, Softmax rows (float32)
void bind_thread_pool(nb::module_ &m);  // src/thread_pool.cpp: the persistent helper threads

namespace {

template <typename T>
using In4 = nb::ndarray<const T, nb::ndim<4>, nb::c_contig, nb::device::cpu>;
template <typename T>
using Out4 = nb::ndarray<nb::numpy, T, nb::ndim<4>>;

// The indexed loop of max_pool2d: per output, the running maximum and its tap in registers,
// branch-free selects (a compare-and-branch per tap mispredicts on ReLU outputs, and the
// running index spilled to the stack: 12 vs 3 ms on 16x32x62x62, 2x2 stride 2). KH, KW > 0
// fix the window at compile time (the 2x2 pool, unrolled), 0 takes kh, kw.
template <typename T, int64_t KH = 0, int64_t KW = 0>
void max_pool2d_indexed(const T *x, T *y, int64_t *idx, int64_t planes, int64_t hp, int64_t wp, int64_t kh_,
                        int64_t kw_, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t oh, int64_t ow,
                        int64_t pad_top, int64_t pad_left, int64_t height, int64_t width, int64_t storage_order) {
    const int64_t kh = KH ? KH : kh_, kw = KW ? KW : kw_;
    // the flat index of tap (a, b) in output (i, j)'s window: base(i, j) + a * row_step + b * col_step
    const int64_t row_step = storage_order ? dh : dh * width, col_step = storage_order ? dw * height : dw;
    for (int64_t p = 0; p < planes; ++p) {
        const T *plane = x + p * hp * wp;
        for (int64_t i = 0; i < oh; ++i) {
            T *yrow = y + (p * oh + i) * ow;
            int64_t *irow = idx + (p * oh + i) * ow;
            const T *src = plane + i * sh * wp;
            for (int64_t j = 0; j < ow; ++j) {
                const T *win = src + j * sw;
                T best = win[0];
                int64_t at = 0;  // a * row_step + b * col_step of the maximum
                for (int64_t a = 0; a < kh; ++a) {
                    for (int64_t b = a == 0 ? 1 : 0; b < kw; ++b) {
                        const T v = win[a * dh * wp + b * dw];
                        const int64_t gt = -static_cast<int64_t>(v > best);
                        at ^= (at ^ (a * row_step + b * col_step)) & gt;
                        const T m = v > best ? v : best;
                        best = v != v ? v : m;  // a NaN wins; the index stays the last larger number's
                    }
                }
                const int64_t r = i * sh - pad_top, q = j * sw - pad_left;
                yrow[j] = best;
                irow[j] = p * height * width + (storage_order ? q * height + r : r * width + q) + at;
            }
        }
    }
}

// 2-D max pooling over an already padded NCHW input. A NaN in a window makes its maximum
// NaN (as numpy's maximum); the index stays that of the largest number before it. Ties
// keep the first maximum in kernel order (as onnxruntime does). idx holds the flat index
// of the maximum inside the unpadded (n, c) plane, row-major (storage_order 0) or
// column-major (1), plus the plane offset, as MaxPool's Indices output defines it.
template <typename T>
nb::tuple max_pool2d(In4<T> xp, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
                     int64_t oh, int64_t ow, int64_t pad_top, int64_t pad_left, int64_t height, int64_t width,
                     int64_t storage_order, bool want_indices) {
    const int64_t n = xp.shape(0), c = xp.shape(1), hp = xp.shape(2), wp = xp.shape(3);
    if (kh <= 0 || kw <= 0 || sh <= 0 || sw <= 0 || dh <= 0 || dw <= 0 || oh < 0 || ow < 0)
        throw std::invalid_argument("max_pool2d: kernel, strides, dilations must be positive");
    if (oh > 0 && (oh - 1) * sh + (kh - 1) * dh >= hp) throw std::invalid_argument("max_pool2d: window past input");
    if (ow > 0 && (ow - 1) * sw + (kw - 1) * dw >= wp) throw std::invalid_argument("max_pool2d: window past input");
    const size_t out_size = static_cast<size_t>(n * c * oh * ow);
    T *y = new T[out_size ? out_size : 1];
    int64_t *idx = want_indices ? new int64_t[out_size ? out_size : 1] : nullptr;
    const T *x = xp.data();
    {
        nb::gil_scoped_release release;
        if (idx && kh == 2 && kw == 2) {
            max_pool2d_indexed<T, 2, 2>(x, y, idx, n * c, hp, wp, kh, kw, sh, sw, dh, dw, oh, ow, pad_top, pad_left,
                                        height, width, storage_order);
        } else if (idx) {
            max_pool2d_indexed(x, y, idx, n * c, hp, wp, kh, kw, sh, sw, dh, dw, oh, ow, pad_top, pad_left, height,
                               width, storage_order);
        } else {
            // per output row: one pass per kernel tap over contiguous input rows, so the
            // inner loop streams memory and keeps the running max in the output row
            for (int64_t p = 0; p < n * c; ++p) {
                const T *plane = x + p * hp * wp;
                for (int64_t i = 0; i < oh; ++i) {
                    T *yrow = y + (p * oh + i) * ow;
                    for (int64_t a = 0; a < kh; ++a) {
                        const T *src = plane + (i * sh + a * dh) * wp;
                        for (int64_t b = 0; b < kw; ++b) {
                            const T *tap = src + b * dw;
                            if (a == 0 && b == 0) {
                                for (int64_t j = 0; j < ow; ++j) yrow[j] = tap[j * sw];
                                continue;
                            }
                            // branch-free: the max, then NaN wins
                            for (int64_t j = 0; j < ow; ++j) {
                                const T v = tap[j * sw], y0 = yrow[j];
                                const T m = v > y0 ? v : y0;
                                yrow[j] = v != v ? v : m;
                            }
                        }
                    }
                }
            }
        }
    }
    nb::capsule y_owner(y, [](void *ptr) noexcept { delete[] static_cast<T *>(ptr); });
    Out4<T> y_arr(y, {static_cast<size_t>(n), static_cast<size_t>(c), static_cast<size_t>(oh), static_cast<size_t>(ow)},
                  y_owner);
    if (!idx) return nb::make_tuple(y_arr, nb::none());
    nb::capsule i_owner(idx, [](void *ptr) noexcept { delete[] static_cast<int64_t *>(ptr); });
    Out4<int64_t> i_arr(idx, {static_cast<size_t>(n), static_cast<size_t>(c), static_cast<size_t>(oh),
                              static_cast<size_t>(ow)}, i_owner);
    return nb::make_tuple(y_arr, i_arr);
}

}  // namespace

NB_MODULE(_native, m) {
    m.doc() = "onnx-light's native loops; every function has a pure-Python twin";
    m.def("max_pool2d", &max_pool2d<float>, nb::arg("xp"), nb::arg("kh"), nb::arg("kw"), nb::arg("sh"), nb::arg("sw"),
          nb::arg("dh"), nb::arg("dw"), nb::arg("oh"), nb::arg("ow"), nb::arg("pad_top"), nb::arg("pad_left"),
          nb::arg("height"), nb::arg("width"), nb::arg("storage_order"), nb::arg("want_indices"));
    m.def("max_pool2d", &max_pool2d<double>, nb::arg("xp"), nb::arg("kh"), nb::arg("kw"), nb::arg("sh"), nb::arg("sw"),
          nb::arg("dh"), nb::arg("dw"), nb::arg("oh"), nb::arg("ow"), nb::arg("pad_top"), nb::arg("pad_left"),
          nb::arg("height"), nb::arg("width"), nb::arg("storage_order"), nb::arg("want_indices"));
    bind_codec(m);
    bind_conv(m);
    bind_conv_backward(m);
    bind_recurrent(m);
    bind_resample(m);
    bind_pool(m);
    bind_elementwise(m);
    bind_thread_pool(m);
}
