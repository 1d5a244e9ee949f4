// What the ISA-specific convolution kernels share (src/conv.cpp: AVX-512, the tiled
// driver and the Python binding; src/conv_avx2.cpp: AVX2 + FMA): the geometry, weight
// packing, the zero-bordered input buffer, pixel runs, and the driver that walks pixel
// panels and weight row blocks around one ISA's register tile.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "thread_pool.h"

namespace onnx_light_conv {

struct Shape {
    int64_t n, c, h, w;      // input
    int64_t m, kh, kw;       // weights (m, c / group, kh, kw)
    int64_t sh, sw, dh, dw;  // strides, dilations
    int64_t pt, pl;          // begin pads (end pads only shape oh, ow)
    int64_t oh, ow, group;
};

// What follows the bias as each output value is stored: + residual (a tensor laid out like
// y: the skip connection of a residual Add), then the activation act.
enum Act : int {
    ACT_NONE = 0,
    ACT_RELU = 1,         // max(v, 0)
    ACT_CLIP = 2,         // min(max(v, a), b)
    ACT_HARDSWISH = 3,    // v * min(max(v / 6 + 1/2, 0), 1)
    ACT_HARDSIGMOID = 4,  // min(max(a v + b, 0), 1)
    ACT_SILU = 5,         // v * sigmoid(v) = v / (1 + exp(-v))
    ACT_SIGMOID = 6,      // 1 / (1 + exp(-v))
};
struct Epilogue {
    int act = ACT_NONE;
    float a = 0.0f, b = 0.0f;
    const float *residual = nullptr;
    // the ReLU alone is applied inside the register tiles; anything else by a pass per row
    bool tile_relu() const { return act == ACT_RELU && !residual; }
    bool post() const { return !tile_relu() && (act != ACT_NONE || residual); }
};
// y[i] = act(y[i] + res[i]) for i < n (res may be null): one ISA's row pass
using EpilogueFn = void (*)(const Epilogue &ep, float *y, const float *res, int64_t n);

// `planes` input planes copied into the middle of a zero-bordered buffer (the borders
// are zeroed once and never written), tall enough for every window row and at least
// `width` wide, so that kernels read whole vectors with no bounds checks. Without pads
// and extra width (and unless `always`) the planes are read where they are.
// At least n floats of a per-thread buffer (slot 0 or 1) that grows and is kept: the drivers'
// whole-input copies and packed panels, which fresh memory would page-fault in every call (a
// conv net training step: ~7 us per 4 KiB page). A call's two uses take two slots; no call
// nests another on one thread; the helper threads only read the caller's.
float *thread_scratch(int slot, size_t n);

// floats owned, or borrowed from thread_scratch
struct ScratchFloats {
    std::unique_ptr<float[]> owned;
    float *ptr = nullptr;
    ScratchFloats(size_t n, int slot) {
        if (slot >= 0) {
            ptr = thread_scratch(slot, n);
        } else if (n) {
            owned.reset(new float[n]);
            ptr = owned.get();
        }
    }
    float *get() const { return ptr; }
};

struct PaddedPlanes {
    int64_t hp, wp;
    bool copies;
    ScratchFloats buf;
    int64_t bordered = 0;  // the first planes whose borders are zero
    // scratch: a thread_scratch slot for the copy, or -1 (owned)
    PaddedPlanes(const Shape &s, int64_t planes, int64_t width, bool always = false, int scratch = -1)
        : hp(std::max(s.pt + s.h, (s.oh - 1) * s.sh + (s.kh - 1) * s.dh + 1)),
          wp(std::max(s.pl + s.w, width)),
          copies(always || hp != s.h || wp != s.w || s.pt || s.pl),
          buf(copies ? static_cast<size_t>(planes * hp * wp) : 0, copies ? scratch : -1) {}
    // the planes from x (planes x h x w), as rows of wp floats; the borders are written once
    // per plane (not the whole buffer zeroed first: the copy rewrites the middle)
    const float *fill(const Shape &s, const float *x, int64_t planes) {
        if (!copies) return x;
        for (int64_t c = 0; c < planes; ++c) fill_plane(s, x, c, c >= bordered);
        bordered = std::max(bordered, planes);
        return buf.get();
    }
    // plane c from x's plane c (with its borders when `borders`); planes are independent, so
    // that workers can fill them at once (fill_planes)
    void fill_plane(const Shape &s, const float *x, int64_t c, bool borders = true) {
        const int64_t right = wp - s.pl - s.w;
        float *plane = buf.get() + c * hp * wp;
        if (borders) {
            std::fill(plane, plane + s.pt * wp, 0.0f);
            std::fill(plane + (s.pt + s.h) * wp, plane + hp * wp, 0.0f);
            for (int64_t i = 0; i < s.h; ++i) {
                float *row = plane + (i + s.pt) * wp;
                std::fill(row, row + s.pl, 0.0f);
                std::fill(row + s.pl + s.w, row + s.pl + s.w + right, 0.0f);
            }
        }
        for (int64_t i = 0; i < s.h; ++i)
            std::memcpy(plane + (i + s.pt) * wp + s.pl, x + (c * s.h + i) * s.w, sizeof(float) * s.w);
    }
    // offsets in the filled planes of weight rows k0 .. k0 + kc - 1 = (c, a, b): tap (a, b) of plane c
    void tap_offsets(const Shape &s, int64_t k0, int64_t kc, int64_t *koff) const {
        const int64_t kk = s.kh * s.kw;
        for (int64_t k = k0; k < k0 + kc; ++k)
            koff[k - k0] = (k / kk) * hp * wp + ((k % kk) / s.kw) * s.dh * wp + (k % s.kw) * s.dw;
    }
};

// A 1x1, stride-1, unpadded convolution's panels: rows [k0, k0 + kc) of the pixels
// [p0, p0 + len) (P per input plane) as panels of nr (kc x nr each, zero past the last
// pixel): plain copies, row by row so that each input row is read in order.
inline void pack_pointwise(const float *x, int64_t P, int64_t k0, int64_t kc, int64_t p0, int64_t len, int64_t nr,
                           float *cols) {
    for (int64_t k = 0; k < kc; ++k) {
        const float *src = x + (k0 + k) * P + p0;
        for (int64_t j = 0; j < len; j += nr) {
            float *dst = cols + (j / nr * kc + k) * nr;
            if (j + nr <= len) {
                for (int64_t t = 0; t < nr; ++t) dst[t] = src[j + t];
            } else {
                for (int64_t t = 0; t < len - j; ++t) dst[t] = src[j + t];
                for (int64_t t = len - j; t < nr; ++t) dst[t] = 0.0f;
            }
        }
    }
}

// One run of output pixels on the same output row: panel columns [j, j + len), output
// row i, first output column j0.
struct Run {
    int64_t j, len, i, j0;
};

// The runs of the (at most nr) pixels from flat output pixel p0; returns their number.
inline int64_t panel_runs(const Shape &s, int64_t p0, int64_t nr, Run *runs) {
    const int64_t count = std::min(nr, s.oh * s.ow - p0);
    int64_t n = 0;
    for (int64_t j = 0; j < count; ++n) {
        const int64_t p = p0 + j, i = p / s.ow, j0 = p % s.ow, len = std::min(count - j, s.ow - j0);
        runs[n] = {j, len, i, j0};
        j += len;
    }
    return n;
}

// The zero-bordered input (as PaddedPlanes would hold it, at least `width` wide) split by the
// strides into sh x sw phase planes per input plane: phase (r, q) of a plane holds its bordered
// cells (u sh + r, v sw + q) at (u, v), hq x wq of them. A tap's cells for a run of output
// pixels along a row are then consecutive (output pixel (i, j) and tap (a, b) read phase
// (a dh % sh, b dw % sw) at (i + a dh / sh, j + b dw / sw)), so that strided convolutions
// are read in place like stride-1 ones.
struct PhasePlanes {
    int64_t sh, sw, hq, wq;
    ScratchFloats buf;
    // `slack` zeros after the last plane, for a kernel whose dropped pixels read past it;
    // scratch: a thread_scratch slot, or -1 (owned)
    PhasePlanes(const Shape &s, int64_t planes, int64_t width, int64_t slack = 0, int scratch = -1)
        : sh(s.sh), sw(s.sw),
          hq((std::max(s.pt + s.h, (s.oh - 1) * s.sh + (s.kh - 1) * s.dh + 1) + s.sh - 1) / s.sh),
          wq((std::max(s.pl + s.w, width) + s.sw - 1) / s.sw),
          buf(static_cast<size_t>(planes * s.sh * s.sw * hq * wq + slack), scratch) {
        std::fill(buf.get() + planes * plane_floats(), buf.get() + planes * plane_floats() + slack, 0.0f);
    }
    int64_t plane_floats() const { return sh * sw * hq * wq; }  // the phases of one input plane
    int64_t rows() const { return sh * hq; }                    // bordered rows per plane
    // the planes from x (planes x h x w)
    void fill(const Shape &s, const float *x, int64_t planes) {
        for (int64_t p = 0; p < planes; ++p) fill_rows(s, x, p, 0, rows());
    }
    // bordered rows [r0, r1) of plane p (each row's sw phase rows, zeros where no input is):
    // disjoint row ranges write disjoint cells, so that workers can fill them at once
    void fill_rows(const Shape &s, const float *x, int64_t p, int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t i = r - s.pt;
            const float *src = i >= 0 && i < s.h ? x + (p * s.h + i) * s.w : nullptr;
            for (int64_t q = 0; q < sw; ++q) {
                // input column j sits at bordered column j + pl: phase (j + pl) % sw, cell (j + pl) / sw
                float *dst = buf.get() + ((p * sh + r % sh) * sw + q) * hq * wq + r / sh * wq;
                std::fill(dst, dst + wq, 0.0f);
                if (!src) continue;
                const int64_t j0 = ((q - s.pl) % sw + sw) % sw, cell = (j0 + s.pl) / sw;  // first column, its cell
                if (sw == 1) {
                    std::memcpy(dst + s.pl, src, sizeof(float) * s.w);
                } else if (sw == 2) {  // a constant stride, so that the loop vectorizes
                    const float *from = src + j0;
                    float *to = dst + cell;
                    for (int64_t t = 0, n = (s.w - j0 + 1) / 2; t < n; ++t) to[t] = from[2 * t];
                } else {
                    for (int64_t j = j0; j < s.w; j += sw) dst[(j + s.pl) / sw] = src[j];
                }
            }
        }
    }
    // offsets (from a group's first plane) of weight rows k0 .. k0 + kc - 1 = (c, a, b) for output pixel (0, 0)
    void tap_offsets(const Shape &s, int64_t k0, int64_t kc, int64_t *koff) const {
        const int64_t kk = s.kh * s.kw;
        for (int64_t k = k0; k < k0 + kc; ++k) {
            const int64_t c = k / kk, ra = (k % kk) / s.kw * s.dh, cb = k % s.kw * s.dw;
            koff[k - k0] = ((c * sh + ra % sh) * sw + cb % sw) * hq * wq + ra / sh * wq + cb / sw;
        }
    }
};

// Rows k < kc of the packed panel of the nr pixels from p0 read from phase planes (row k's
// tap at xq + koff[k]; zeros past the last pixel).
inline void pack_phased(const Shape &s, const float *xq, int64_t wq, const int64_t *koff, int64_t kc, int64_t p0,
                        int64_t nr, float *cols) {
    Run runs[64];
    const int64_t nruns = panel_runs(s, p0, nr, runs), count = std::min(nr, s.oh * s.ow - p0);
    for (int64_t k = 0; k < kc; ++k) {
        float *dst = cols + k * nr;
        for (int64_t q = 0; q < nruns; ++q)
            std::memcpy(dst + runs[q].j, xq + koff[k] + runs[q].i * wq + runs[q].j0, sizeof(float) * runs[q].len);
        for (int64_t t = count; t < nr; ++t) dst[t] = 0.0f;
    }
}

// dst[t] = row[first + t * sw] for the t < len whose column lies in [0, w) (others untouched).
inline void copy_strided(const float *row, int64_t first, int64_t len, int64_t sw, int64_t w, float *dst) {
    const int64_t lo = first >= 0 ? 0 : (-first + sw - 1) / sw;
    const int64_t hi = std::min(len, w - first > 0 ? (w - first + sw - 1) / sw : 0);
    for (int64_t t = lo; t < hi; ++t) dst[t] = row[first + t * sw];
}

// One ISA's register tile: C[r, 0:cols] (+)= sum_k A[r * lda + k] * B[k][0:cols] for r < rows,
// where A holds rows of the weights as they are (no packing: each row is read in order) and B
// is a packed panel of nr pixels (nr floats per row k; koff unused); `first` adds bias[r]
// instead of reading C, `relu` clamps at zero when storing.
struct TileKernel {
    using Tile = void (*)(int64_t kc, const float *A, int64_t lda, const float *B, const int64_t *koff, float *C,
                          int64_t ldc, int64_t rows, int64_t cols, const float *bias, bool first, bool relu);
    int64_t mr, nr, kc;  // tile rows and columns, reduction block
    Tile tile;
    // rows [k0, k0 + kc) of the packed panel of the nr pixels from p0 (zeros where a tap
    // falls in the padding and past the last pixel), nr floats per row
    void (*pack)(const Shape &s, const float *x, int64_t k0, int64_t kc, int64_t p0, float *cols);
    EpilogueFn epilogue;  // the row pass of Epilogue::post()
    // `pack` from the zero-bordered input (PaddedPlanes of hp rows of wp floats, at least
    // padded_width(s) wide) for column strides 1 and 2: plain loads, no bounds checks;
    // null: `pack` always
    void (*pack_padded)(const Shape &s, const float *xp, int64_t hp, int64_t wp, int64_t k0, int64_t kc, int64_t p0,
                        float *cols) = nullptr;
    // `tile` reading row k of the panel at B + koff[k] in the bordered input (nr cells of one
    // output row, stride 1) instead of a packed panel; null: always packed
    Tile direct = nullptr;
    // `pack` for all `len` pixels from p0 at once (a pixel block: len / nr panels rounded up,
    // kc x nr each), row k of every panel before row k + 1, so that each tap reads its input
    // rows in order: the same panels, bit for bit; null: `pack` per panel
    void (*pack_block)(const Shape &s, const float *x, int64_t k0, int64_t kc, int64_t p0, int64_t len,
                       float *cols) = nullptr;
    // `tile` / `direct` reading the weights packed (a row block's rows as kc x rows floats, k
    // major: A[k * rows + r]; lda unused), so that the driver can keep a panel in L1 and stream
    // the packed weights past it; null: the weights are read as they are
    Tile tile_packed = nullptr, direct_packed = nullptr;
    // the padded width pack_padded reads: every window plus a 16-column spill per run
    static int64_t padded_width(const Shape &s) { return (s.ow + 16) * s.sw + (s.kw - 1) * s.dw + 16; }
};

// fn(worker, i) for every i < items, on the calling thread (worker 0) and up to threads - 1
// helpers of the persistent pool (workers 1, 2, ...: src/thread_pool.h) that claim items
// from a shared counter; returns when every item is done. A helper the scheduler has not run
// yet finds no item left and costs nothing; while another call holds the pool (a second
// session or Python thread) every item runs on the calling thread. fn's exceptions reach
// the caller.
template <class Fn>
void parallel_items(int threads, int64_t items, const Fn &fn) {
    onnx_light_pool::parallel_items(threads, items, fn);
}

// fn(worker, i) for every i < count, by `threads` workers taking runs of consecutive i (at
// most 8 runs per worker, each of at least `least` i): items of a few hundred nanoseconds
// (a depthwise 7 x 7 plane) would spend their time claiming the shared counter
template <class Fn>
void parallel_runs(int threads, int64_t count, int64_t least, const Fn &fn) {
    const int64_t runs = std::max<int64_t>(1, std::min<int64_t>(8 * threads, count / std::max<int64_t>(1, least)));
    parallel_items(threads, runs, [&](int worker, int64_t r) {
        for (int64_t i = r * count / runs; i < (r + 1) * count / runs; ++i) fn(worker, i);
    });
}

// pad.fill(s, x, planes) by `threads` workers (runs of planes: the copy is not a serial
// part of a threaded convolution)
inline const float *fill_planes(PaddedPlanes &pad, const Shape &s, const float *x, int64_t planes, int threads) {
    if (!pad.copies) return x;
    parallel_runs(threads, planes, 4096 / (pad.hp * pad.wp) + 1,
                  [&](int, int64_t c) { pad.fill_plane(s, x, c, c >= pad.bordered); });
    pad.bordered = std::max(pad.bordered, planes);
    return pad.buf.get();
}

// ph.fill(s, x, planes) by `threads` workers (16 bordered rows of one plane per item)
inline void fill_phases(PhasePlanes &ph, const Shape &s, const float *x, int64_t planes, int threads) {
    const int64_t chunks = (ph.rows() + 15) / 16;
    parallel_items(threads, planes * chunks, [&](int, int64_t i) {
        const int64_t r0 = i % chunks * 16;
        ph.fill_rows(s, x, i / chunks, r0, std::min(ph.rows(), r0 + 16));
    });
}

// Conv(x, w, bias) + epilogue with `kernel`'s register tile (BLIS-style blocking): for each
// sample, group and block of output pixels, K in kc blocks; each kc block of the pixel
// panels is packed once (kc x nr per panel, the block's panels together in L2) and every
// block of mr weight rows runs over all of them (its kc x mr weights stay in L1). `threads`
// share the (sample, group, pixel block) items, and the weight rows when those are few.
// `wpacked`: the weights as pack_weights(w, mg, K, t.mr) packs each group's (kept by the caller)
// or null: read as they are.
void run_tiled(const TileKernel &kernel, const Shape &s, const float *x, const float *w, const float *bias,
               const Epilogue &ep, float *y, int threads, const float *wpacked = nullptr);

// The AVX2 tile's weight rows (src/conv_avx2.cpp), and the fewest row blocks per group for which
// run_tiled reads packed weights panel by panel (one process, packing free, this order / the
// row-block-outer one: crnn 256 -> 256 3x3 @2x40 0.81, 128 -> 256 @4x40 0.84, 32 -> 64 @16x80 0.93;
// yolo 16 -> 16 3x3 @80x80 (3 row blocks) 1.23)
constexpr int64_t AVX2_MR = 6, PACK_MIN_BLOCKS = 8;
// whether conv2d reads packed weights of mg outputs per group with a kh x kw kernel
bool packs_weights(bool avx2, int64_t mg, int64_t kh, int64_t kw);
// weights wg (mg rows of K) as TileKernel::tile_packed reads them: the block of rows [r0, r0 + mr)
// at out + r0 K, K x rows floats, k major (its kc block from k0 at out + r0 K + k0 rows)
void pack_weights(const float *wg, int64_t mg, int64_t K, int64_t mr, float *out);

// y = act(Conv(x, w, bias) + residual) for float32 NCHW; y holds n * m * oh * ow floats.
// `threads` (>= 1) workers share the work.
// `winograd`: the weights' Winograd transform (winograd_weights) when the caller keeps it, or
// null (computed per call where the Winograd kernel runs)
// `packed`: pack_weights' form of w kept by the caller (AVX2 only; conv2d_pack_weights) or null
void run_avx512(const Shape &s, const float *x, const float *w, const float *bias, const Epilogue &ep, float *y,
                int threads, const float *winograd = nullptr, const float *packed = nullptr);
void run_avx2(const Shape &s, const float *x, const float *w, const float *bias, const Epilogue &ep, float *y,
              int threads, const float *winograd = nullptr, const float *packed = nullptr);

// Winograd F(2x2, 3x3) (src/conv_winograd.cpp): whether run_avx2 and run_avx512 take it for this
// geometry (`cached`: with the weights' transform given); U (16 x M x C floats) = the transform of
// weights w (M x C x 3 x 3); the convolution by `t`'s tile (U null: transformed per call)
bool winograd_applies(const Shape &s, bool cached);
void winograd_weights(const float *w, int64_t M, int64_t C, float *U);
void run_winograd_avx2(const TileKernel &t, const Shape &s, const float *x, const float *w, const float *U,
                       const float *bias, const Epilogue &ep, float *y, int threads);
// y[i] = act(y[i] + res[i]) for i < n (res may be null)
void epilogue_avx512(const Epilogue &ep, float *y, const float *res, int64_t n);
void epilogue_avx2(const Epilogue &ep, float *y, const float *res, int64_t n);

}  // namespace onnx_light_conv
