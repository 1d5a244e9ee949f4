// The AVX2 + FMA twin of the AVX-512 convolution in src/conv.cpp, for CPUs without
// AVX-512: the register tile and panel packing the shared driver (run_tiled, conv.h)
// runs, with 8-float vectors, a 6 x 16 tile and 16-pixel panels, and the depthwise loop.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "conv.h"
#include "simd.h"

namespace onnx_light_conv {

#if ONNX_LIGHT_AVX512  // x86 with GCC/Clang: the AVX2 code compiles there too
namespace {

constexpr int64_t MR = AVX2_MR;  // output channels per register tile
constexpr int64_t NR = 16;   // output pixels per register tile (two 8-float vectors)
constexpr int64_t KC = 256;  // reduction block: 6 KiB of weights per row block, 16 KiB per panel

// lanes t of an 8-lane vector with lo <= t < hi, as a maskload/maskstore mask
AVX2 inline __m256i lanes(int64_t lo, int64_t hi) {
    const __m256i t = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i from = _mm256_set1_epi32(static_cast<int>(std::clamp<int64_t>(lo, -1, 9)));
    const __m256i to = _mm256_set1_epi32(static_cast<int>(std::clamp<int64_t>(hi, -1, 9)));
    // lo <= t  <=>  t > lo - 1;  t < hi
    return _mm256_and_si256(_mm256_cmpgt_epi32(t, _mm256_sub_epi32(from, _mm256_set1_epi32(1))),
                            _mm256_cmpgt_epi32(to, t));
}

// the even lanes of (a, b): a0 a2 a4 a6 b0 b2 b4 b6
AVX2 inline __m256 evens(__m256 a, __m256 b) {
    const __m256 t = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));  // a0 a2 b0 b2 | a4 a6 b4 b6
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
}

// C[r, 0:cols] (+)= sum_k A[r * lda + k] * Bk[0:cols] for r < R, row k of the pixel panel
// Bk = B + k * NR (packed) or, Direct, B + koff[k] (16 pixels of one output row read in
// place from the bordered input). Packed: the weights are A[k * R + r] (one contiguous
// stream, TileKernel::tile_packed) instead. `first` adds bias[r] instead of reading C; `relu`
// clamps at zero when storing. At R = 6, 12 accumulators + 2 panel vectors + 1 weight = 15 of
// the 16 ymm registers.
template <bool Direct, int R, bool Packed = false>
AVX2 void tile_rows(int64_t kc, const float *A, int64_t lda, const float *B, const int64_t *koff, float *C,
                    int64_t ldc, int64_t cols, const float *bias, bool first, bool relu) {
    const float *a_row[R];
    // packed: row r's weight k at A + k * R + r, so a_row[r] + k * step
    const int64_t step = Packed ? R : 1;
    for (int r = 0; r < R; ++r) a_row[r] = Packed ? A + r : A + r * lda;
    __m256 acc[R][2];
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int64_t k = 0; k < kc; ++k) {
        const float *row = Direct ? B + koff[k] : B + k * NR;
        const __m256 b0 = _mm256_loadu_ps(row), b1 = _mm256_loadu_ps(row + 8);
#pragma GCC unroll 6
        for (int r = 0; r < R; ++r) {
            const __m256 a = _mm256_broadcast_ss(a_row[r] + k * step);
            acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
        }
    }
    // AMD's masked stores are slow (microcoded): whole tiles use plain loads and stores, the
    // edge tiles a copy through `edge`
    const bool whole = cols == NR;
    const __m256 zero = _mm256_setzero_ps();
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {  // fully unrolled, so that acc stays in registers
        float *c = C + r * ldc;
        alignas(32) float edge[NR] = {};
        float *dst = whole ? c : edge;
        __m256 v0, v1;
        if (first) {
            const __m256 add = _mm256_set1_ps(bias ? bias[r] : 0.0f);
            v0 = _mm256_add_ps(acc[r][0], add);
            v1 = _mm256_add_ps(acc[r][1], add);
        } else {
            if (!whole) std::memcpy(edge, c, sizeof(float) * cols);
            v0 = _mm256_add_ps(acc[r][0], _mm256_loadu_ps(dst));
            v1 = _mm256_add_ps(acc[r][1], _mm256_loadu_ps(dst + 8));
        }
        if (relu) {
            v0 = _mm256_max_ps(zero, v0);
            v1 = _mm256_max_ps(zero, v1);
        }
        _mm256_storeu_ps(dst, v0);
        _mm256_storeu_ps(dst + 8, v1);
        if (!whole) std::memcpy(c, edge, sizeof(float) * cols);
    }
}

// TileKernel::tile (Direct: TileKernel::direct; Packed: their tile_packed / direct_packed) for
// this ISA: tile_rows with R = rows (1-6), so that a last row block of fewer than 6 weight rows
// (32 outputs: 5 x 6 + 2) does only its own rows' multiply-adds; each row's sums are the same
// either way
template <bool Direct, bool Packed = false>
AVX2 void tile_6x16(int64_t kc, const float *A, int64_t lda, const float *B, const int64_t *koff, float *C,
                    int64_t ldc, int64_t rows, int64_t cols, const float *bias, bool first, bool relu) {
    switch (rows) {
        case 1: return tile_rows<Direct, 1, Packed>(kc, A, lda, B, koff, C, ldc, cols, bias, first, relu);
        case 2: return tile_rows<Direct, 2, Packed>(kc, A, lda, B, koff, C, ldc, cols, bias, first, relu);
        case 3: return tile_rows<Direct, 3, Packed>(kc, A, lda, B, koff, C, ldc, cols, bias, first, relu);
        case 4: return tile_rows<Direct, 4, Packed>(kc, A, lda, B, koff, C, ldc, cols, bias, first, relu);
        case 5: return tile_rows<Direct, 5, Packed>(kc, A, lda, B, koff, C, ldc, cols, bias, first, relu);
        default: return tile_rows<Direct, MR, Packed>(kc, A, lda, B, koff, C, ldc, cols, bias, first, relu);
    }
}

// TileKernel::pack for this tile: the panel's pixels in runs along an output row; the tap
// (c, a, b) of row k advances with k. Stride-1 runs are masked vector copies, stride-2
// runs two masked loads and a shuffle per 8 pixels.
AVX2 void pack_cols(const Shape &s, const float *x, int64_t k0, int64_t kc, int64_t p0, float *cols) {
    Run runs[NR];
    const int64_t nruns = panel_runs(s, p0, NR, runs), kk = s.kh * s.kw;
    int64_t c = k0 / kk, a = (k0 % kk) / s.kw, b = k0 % s.kw;
    // one panel row is built in `row8` with plain stores (a run's last vector may spill past
    // it: zeros or the next run's cells, which that run rewrites), then copied out
    alignas(32) float row8[NR + 8];
    for (int64_t k = k0; k < k0 + kc; ++k) {
        _mm256_store_ps(row8, _mm256_setzero_ps());
        _mm256_store_ps(row8 + 8, _mm256_setzero_ps());
        const float *plane = x + c * s.h * s.w;
        const int64_t dy = a * s.dh - s.pt, dx = b * s.dw - s.pl;
        for (int64_t q = 0; q < nruns; ++q) {
            const Run &r = runs[q];
            const int64_t ih = r.i * s.sh + dy;
            if (ih < 0 || ih >= s.h) continue;
            const float *row = plane + ih * s.w;
            const int64_t first = r.j0 * s.sw + dx;  // input column of the run's pixel 0
            if (s.sw == 1) {
                const int64_t lo = std::max<int64_t>(0, -first), hi = std::min(r.len, s.w - first);
                for (int64_t t0 = 0; t0 < r.len; t0 += 8)
                    _mm256_storeu_ps(row8 + r.j + t0, _mm256_maskload_ps(row + (first + t0), lanes(lo - t0, hi - t0)));
            } else if (s.sw == 2) {
                // pixel t reads row[first + 2t]: 16 input columns per 8 pixels (zero outside
                // the row and past the run), even lanes kept
                for (int64_t t0 = 0; t0 < r.len; t0 += 8) {
                    const int64_t u = first + 2 * t0;  // input column of lane 0
                    const int64_t end = std::min(s.w, first + 2 * r.len);  // past the run's last cell
                    const __m256 va = _mm256_maskload_ps(row + u, lanes(-u, end - u));
                    const __m256 vb = _mm256_maskload_ps(row + u + 8, lanes(-u - 8, end - u - 8));
                    _mm256_storeu_ps(row8 + r.j + t0, evens(va, vb));
                }
            } else {
                copy_strided(row, first, r.len, s.sw, s.w, row8 + r.j);
            }
        }
        float *dst = cols + (k - k0) * NR;
        _mm256_storeu_ps(dst, _mm256_load_ps(row8));
        _mm256_storeu_ps(dst + 8, _mm256_load_ps(row8 + 8));
        if (++b == s.kw) {
            b = 0;
            if (++a == s.kh) a = 0, ++c;
        }
    }
}

// TileKernel::pack_padded for this tile: each run of the panel is one or two plain 8-float
// copies (stride 1) or two loads and a shuffle per 8 pixels (stride 2) from the bordered
// input; a run's last vector may spill past it (the next run rewrites those cells, and the
// tile drops columns past the last pixel).
AVX2 void pack_padded(const Shape &s, const float *xp, int64_t hp, int64_t wp, int64_t k0, int64_t kc, int64_t p0,
                      float *cols) {
    Run runs[NR];
    const int64_t nruns = panel_runs(s, p0, NR, runs), kk = s.kh * s.kw;
    int64_t c = k0 / kk, a = (k0 % kk) / s.kw, b = k0 % s.kw;
    int64_t start[NR];  // offset of each run's pixel 0 (tap 0, 0) in a plane
    for (int64_t q = 0; q < nruns; ++q) start[q] = runs[q].i * s.sh * wp + runs[q].j0 * s.sw;
    const bool whole = nruns == 1 && runs[0].len == NR;
    alignas(32) float row8[NR + 8] = {};  // zero past the last pixel until a spill
    for (int64_t k = k0; k < k0 + kc; ++k) {
        const float *tap = xp + c * hp * wp + a * s.dh * wp + b * s.dw;
        float *dst = cols + (k - k0) * NR, *out = whole ? dst : row8;
        for (int64_t q = 0; q < nruns; ++q) {
            const float *src = tap + start[q];
            float *o = out + runs[q].j;
            if (s.sw == 1) {
                _mm256_storeu_ps(o, _mm256_loadu_ps(src));
                if (runs[q].len > 8) _mm256_storeu_ps(o + 8, _mm256_loadu_ps(src + 8));
            } else {
                _mm256_storeu_ps(o, evens(_mm256_loadu_ps(src), _mm256_loadu_ps(src + 8)));
                if (runs[q].len > 8) _mm256_storeu_ps(o + 8, evens(_mm256_loadu_ps(src + 16), _mm256_loadu_ps(src + 24)));
            }
        }
        if (!whole) {
            _mm256_storeu_ps(dst, _mm256_load_ps(row8));
            _mm256_storeu_ps(dst + 8, _mm256_load_ps(row8 + 8));
        }
        if (++b == s.kw) {
            b = 0;
            if (++a == s.kh) a = 0, ++c;
        }
    }
}

// TileKernel::pack_block for this tile, from the input as it is (no bordered copy): row k of
// the block's pixels is first gathered in `line`, one output row segment at a time (per 8
// pixels, a plain 8-float copy at stride 1, two loads and a shuffle at stride 2, masked loads
// where the window leaves the planes, zeros for rows in the padding; a segment's last vector
// may spill past it, and the next one rewrites those cells), then copied out as row k of each
// panel. Each tap reads its input rows in order, all rows of one
// tap before the next, where per panel the taps hop between kc rows every 16 pixels (48 rows
// of 16 planes at 3 x 3: too many streams for the prefetcher).
AVX2 void pack_block(const Shape &s, const float *x, int64_t k0, int64_t kc, int64_t p0, int64_t len, float *cols) {
    thread_local std::vector<int64_t> segs;  // per output row segment: output row, column, first pixel, count
    thread_local std::vector<float> line;
    const int64_t panels = (len + NR - 1) / NR, kk = s.kh * s.kw, h = s.h, w = s.w, top = s.pt, left = s.pl;
    segs.clear();
    for (int64_t t = 0; t < len;) {
        const int64_t p = p0 + t, i = p / s.ow, j0 = p % s.ow, n = std::min(len - t, s.ow - j0);
        segs.insert(segs.end(), {i, j0, t, n});
        t += n;
    }
    const size_t need = static_cast<size_t>(panels * NR + 8);
    if (line.size() < need) line.resize(need);
    float *lin = line.data();
    std::fill(lin + len, lin + need, 0.0f);  // past the last pixel: zeros until a spill
    const __m256 zero = _mm256_setzero_ps();
    int64_t c = k0 / kk, a = (k0 % kk) / s.kw, b = k0 % s.kw;
    for (int64_t k = 0; k < kc; ++k) {
        const float *plane = x + c * h * w;
        const int64_t dy = a * s.dh - top, dx = b * s.dw - left;
        for (size_t q = 0; q < segs.size(); q += 4) {
            const int64_t ih = segs[q] * s.sh + dy, first = segs[q + 1] * s.sw + dx, n = segs[q + 3];
            float *o = lin + segs[q + 2];
            const float *row = plane + ih * w;
            if (ih < 0 || ih >= h) {
                for (int64_t u = 0; u < n; u += 8) _mm256_storeu_ps(o + u, zero);
            } else if (s.sw == 1) {
                const int64_t lo = std::max<int64_t>(0, -first), hi = std::min(n, w - first);  // pixels in the row
                for (int64_t u = 0; u < n; u += 8)
                    _mm256_storeu_ps(o + u, u >= lo && u + 8 <= hi ? _mm256_loadu_ps(row + first + u)
                                                                 : _mm256_maskload_ps(row + first + u, lanes(lo - u, hi - u)));
            } else if (s.sw == 2) {
                const int64_t end = std::min(w, first + 2 * n);  // past the segment's last cell
                for (int64_t u = 0; u < n; u += 8) {
                    const int64_t v = first + 2 * u;  // input column of lane 0
                    const bool inside = v >= 0 && v + 16 <= end;
                    const __m256 va = inside ? _mm256_loadu_ps(row + v) : _mm256_maskload_ps(row + v, lanes(-v, end - v));
                    const __m256 vb = inside ? _mm256_loadu_ps(row + v + 8)
                                             : _mm256_maskload_ps(row + v + 8, lanes(-v - 8, end - v - 8));
                    _mm256_storeu_ps(o + u, evens(va, vb));
                }
            } else {
                for (int64_t u = 0; u < n; u += 8) _mm256_storeu_ps(o + u, zero);
                copy_strided(row, first, n, s.sw, w, o);
            }
        }
        float *dst = cols + k * NR;
        for (int64_t j = 0; j < panels; ++j, dst += kc * NR) {
            _mm256_storeu_ps(dst, _mm256_loadu_ps(lin + j * NR));
            _mm256_storeu_ps(dst + 8, _mm256_loadu_ps(lin + j * NR + 8));
        }
        if (++b == s.kw) {
            b = 0;
            if (++a == s.kh) a = 0, ++c;
        }
    }
}

// e^x for |x| <= 87: 2^n e^r with n = round(x log2 e), r = x - n ln 2 (in two parts) in
// [-ln2/2, ln2/2], e^r by its degree-7 Taylor polynomial (relative error below 1e-8).
AVX2 inline __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_set1_ps(87.0f), _mm256_max_ps(_mm256_set1_ps(-87.0f), x));  // NaN stays NaN
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    for (const float c : {1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f})
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

AVX2 inline __m256 activate8(const Epilogue &ep, __m256 v) {
    const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
    switch (ep.act) {
        case ACT_RELU: return _mm256_max_ps(zero, v);
        case ACT_CLIP: return _mm256_min_ps(_mm256_set1_ps(ep.b), _mm256_max_ps(_mm256_set1_ps(ep.a), v));
        case ACT_HARDSWISH: {
            const __m256 g = _mm256_fmadd_ps(v, _mm256_set1_ps(1.0f / 6.0f), _mm256_set1_ps(0.5f));
            return _mm256_mul_ps(v, _mm256_min_ps(one, _mm256_max_ps(zero, g)));
        }
        case ACT_HARDSIGMOID: {
            const __m256 g = _mm256_fmadd_ps(v, _mm256_set1_ps(ep.a), _mm256_set1_ps(ep.b));
            return _mm256_min_ps(one, _mm256_max_ps(zero, g));
        }
        case ACT_SILU: return _mm256_div_ps(v, _mm256_add_ps(one, exp8(_mm256_sub_ps(zero, v))));
        case ACT_SIGMOID: return _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_sub_ps(zero, v))));
        default: return v;
    }
}

// y[i] = act(y[i] + res[i]) with the activation fixed (Act), so that the loop holds no branch
// and consecutive vectors' exponentials overlap
template <int Act>
AVX2 void epilogue8_act(const Epilogue &ep, float *y, const float *res, int64_t n) {
    Epilogue fixed = ep;
    fixed.act = Act;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(y + i);
        if (res) v = _mm256_add_ps(v, _mm256_loadu_ps(res + i));
        _mm256_storeu_ps(y + i, activate8(fixed, v));
    }
    if (i < n) {
        const __m256i m = lanes(0, n - i);
        __m256 v = _mm256_maskload_ps(y + i, m);
        if (res) v = _mm256_add_ps(v, _mm256_maskload_ps(res + i, m));
        _mm256_maskstore_ps(y + i, m, activate8(fixed, v));
    }
}

// EpilogueFn of this ISA
AVX2 void epilogue8(const Epilogue &ep, float *y, const float *res, int64_t n) {
    switch (ep.act) {
        case ACT_RELU: return epilogue8_act<ACT_RELU>(ep, y, res, n);
        case ACT_CLIP: return epilogue8_act<ACT_CLIP>(ep, y, res, n);
        case ACT_HARDSWISH: return epilogue8_act<ACT_HARDSWISH>(ep, y, res, n);
        case ACT_HARDSIGMOID: return epilogue8_act<ACT_HARDSIGMOID>(ep, y, res, n);
        case ACT_SILU: return epilogue8_act<ACT_SILU>(ep, y, res, n);
        case ACT_SIGMOID: return epilogue8_act<ACT_SIGMOID>(ep, y, res, n);
        default: return epilogue8_act<ACT_NONE>(ep, y, res, n);
    }
}

constexpr int64_t round8(int64_t v) { return (v + 7) / 8 * 8; }

// One depthwise input plane as the kernel reads it: bordered row r (input row r - pt; zeros
// above and below) stored as sw phase rows of wq floats, phase q holding the bordered columns
// u = t sw + q at cell t (input column u - pl; zeros left and right). Output pixel (i, j) and tap
// (a, b) read phase (b dw) % sw of bordered row i sh + a dh at cell j + (b dw) / sw, so that 8
// consecutive output columns are one plain load whatever the strides and dilations (no shuffle
// or gather per multiply-add: stride-2 columns are split once per input row).
struct DepthwiseLayout {
    int64_t hp, wq, rs;  // bordered rows read, floats per phase row, floats per bordered row (sw wq)
    int64_t stage;       // floats of the staging row (sw > 1: one bordered row before its split)
    std::vector<int64_t> taps;  // offset of tap (a, b) from output pixel (0, 0)'s cell
    explicit DepthwiseLayout(const Shape &s) : taps(static_cast<size_t>(s.kh * s.kw)) {
        hp = (s.oh - 1) * s.sh + (s.kh - 1) * s.dh + 1;
        // every cell a vector reads: 8 per started output vector, past the widest tap
        wq = round8(round8(s.ow) + (s.kw - 1) * s.dw / s.sw + 1);
        // stride 1 copies input rows 8 floats at a time into the row, stride 2 splits them 8 at
        // a time into 4 cells of each phase (zeros past the row's end)
        if (s.sw == 1) wq = std::max(wq, round8(s.pl + s.w));
        if (s.sw == 2) wq = std::max(wq, round8((s.pl + 1) / 2 + (s.w + 7) / 8 * 4));
        rs = s.sw * wq;
        stage = s.sw <= 2 ? 0 : round8(std::max(rs, s.pl + round8(s.w))) + 8;
        for (int64_t a = 0; a < s.kh; ++a)
            for (int64_t b = 0; b < s.kw; ++b)
                taps[a * s.kw + b] = a * s.dh * rs + (b * s.dw) % s.sw * wq + (b * s.dw) / s.sw;
    }
    int64_t floats() const { return hp * rs + stage; }  // one worker's buffer (zeroed once per call)
};

// Input plane x (h x w) into buf (DepthwiseLayout, zero wherever no input lands since the
// buffer was zeroed: every plane writes the same cells). Vectors past a row's end carry zeros
// (masked loads) into cells that are zero anyway.
AVX2 void depthwise_fill(const Shape &s, const DepthwiseLayout &d, const float *x, float *buf) {
    const int64_t rows = std::min(s.h, d.hp - s.pt);  // input rows read (the rest never are)
    float *stage = buf + d.hp * d.rs;
    // stride 2: input column j lands in phase (pl + j) % 2 at cell (pl + j) / 2, so the even
    // columns go to phase pl % 2 from cell pl / 2, the odd ones to the other from (pl + 1) / 2
    const int64_t even_at = s.pl % 2 * d.wq + s.pl / 2, odd_at = (1 - s.pl % 2) * d.wq + (s.pl + 1) / 2;
    for (int64_t i = 0; i < rows; ++i) {
        const float *src = x + i * s.w;
        float *row = buf + (i + s.pt) * d.rs;
        if (s.sw == 2) {  // 8 input columns: one permute, 4 cells of each phase
            const __m256i split = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
            for (int64_t j = 0; j < s.w; j += 8) {
                const __m256 v = j + 8 <= s.w ? _mm256_loadu_ps(src + j) : _mm256_maskload_ps(src + j, lanes(0, s.w - j));
                const __m256 p = _mm256_permutevar8x32_ps(v, split);
                _mm_storeu_ps(row + even_at + j / 2, _mm256_castps256_ps128(p));
                _mm_storeu_ps(row + odd_at + j / 2, _mm256_extractf128_ps(p, 1));
            }
            continue;
        }
        float *dst = s.sw == 1 ? row + s.pl : stage + s.pl;  // the bordered row, or its staging copy
        for (int64_t j = 0; j < s.w; j += 8) {
            const __m256 v = j + 8 <= s.w ? _mm256_loadu_ps(src + j) : _mm256_maskload_ps(src + j, lanes(0, s.w - j));
            _mm256_storeu_ps(dst + j, v);
        }
        if (s.sw > 2)  // any other stride: split one cell at a time
            for (int64_t q = 0; q < s.sw; ++q)
                for (int64_t t = 0; t < d.wq; ++t) row[q * d.wq + t] = stage[t * s.sw + q];
    }
}

// Output rows [i0, i0 + rows) (rows <= R), columns [jb, jb + 8 * vectors) (vectors <= V) of one
// depthwise output plane (P = oh ow floats at out; res: the residual's plane or null), from the
// bordered plane `src` (rstep floats per output row) and the taps' offsets and weights: R x V
// independent FMA chains from `start` (the bias), then + residual and the activation Act in
// registers. A vector's lanes past the row's end spill into the next row's first cells (which
// the sweep, in increasing order, writes later); only a plane's last cells take a partial store.
template <int R, int V, int Act>
AVX2 inline void depthwise_block(const Shape &s, const Epilogue &ep, const float *src, int64_t rstep,
                                 const int64_t *toff, const float *k, int64_t taps, __m256 start, const float *res,
                                 float *out, int64_t i0, int64_t rows, int64_t jb, int64_t vectors) {
    __m256 acc[R][V];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int v = 0; v < V; ++v) acc[r][v] = start;
    const float *base = src + i0 * rstep + jb;
    for (int64_t t = 0; t < taps; ++t) {
        const __m256 kv = _mm256_broadcast_ss(k + t);
        const float *tap = base + toff[t];
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            if (r >= rows) break;
#pragma GCC unroll 8
            for (int v = 0; v < V; ++v) {
                if (v >= vectors) break;
                acc[r][v] = _mm256_fmadd_ps(kv, _mm256_loadu_ps(tap + r * rstep + 8 * v), acc[r][v]);
            }
        }
    }
    Epilogue fixed = ep;
    fixed.act = Act;
    const int64_t P = s.oh * s.ow;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        if (r >= rows) break;
#pragma GCC unroll 8
        for (int v = 0; v < V; ++v) {
            if (v >= vectors) break;
            const int64_t o = (i0 + r) * s.ow + jb + 8 * v;  // the vector's first cell in the plane
            const int64_t valid = std::min<int64_t>(8, s.ow - (jb + 8 * v));
            __m256 val = acc[r][v];
            if (o + 8 <= P) {
                if (res) val = _mm256_add_ps(val, _mm256_loadu_ps(res + o));
                _mm256_storeu_ps(out + o, activate8(fixed, val));
            } else {  // the plane's last cells: no store past them (another worker's plane)
                const __m256i m = lanes(0, valid);
                if (res) val = _mm256_add_ps(val, _mm256_maskload_ps(res + o, m));
                _mm256_maskstore_ps(out + o, m, activate8(fixed, val));  // once per plane
            }
        }
    }
}

// The output planes of input plane c of sample n with the activation Act: the plane filled into
// this worker's zeroed buffer, then blocks of output rows; rows of up to 8 columns go 8 rows at
// a time, of 16 four, of 32 two, wider rows 64 columns at a time (8 chains either way).
template <int Act>
AVX2 void depthwise_plane(const Shape &s, const DepthwiseLayout &d, float *buf, const float *x, const float *w,
                          const float *bias, const Epilogue &ep, float *y, int64_t n, int64_t c) {
    const int64_t mult = s.m / s.group, P = s.oh * s.ow, taps = s.kh * s.kw, rstep = s.sh * d.rs;
    const int64_t vr = (s.ow + 7) / 8, R = vr <= 1 ? 8 : vr == 2 ? 4 : vr <= 4 ? 2 : 1;
    depthwise_fill(s, d, x + (n * s.c + c) * s.h * s.w, buf);
    const int64_t *toff = d.taps.data();
    for (int64_t m = c * mult; m < (c + 1) * mult; ++m) {
        const float *k = w + m * taps;
        float *out = y + (n * s.m + m) * P;
        const float *res = ep.residual ? ep.residual + (n * s.m + m) * P : nullptr;
        const __m256 start = _mm256_set1_ps(bias ? bias[m] : 0.0f);
        for (int64_t i = 0; i < s.oh; i += R) {
            const int64_t rows = std::min(R, s.oh - i);
            if (vr <= 1) depthwise_block<8, 1, Act>(s, ep, buf, rstep, toff, k, taps, start, res, out, i, rows, 0, vr);
            else if (vr == 2) depthwise_block<4, 2, Act>(s, ep, buf, rstep, toff, k, taps, start, res, out, i, rows, 0, vr);
            else if (vr <= 4) depthwise_block<2, 4, Act>(s, ep, buf, rstep, toff, k, taps, start, res, out, i, rows, 0, vr);
            else
                for (int64_t jb = 0; jb < s.ow; jb += 64)
                    depthwise_block<1, 8, Act>(s, ep, buf, rstep, toff, k, taps, start, res, out, i, 1, jb,
                                               std::min<int64_t>(8, (s.ow - jb + 7) / 8));
        }
    }
}

// Every plane with the activation Act, by `threads` workers (runs of planes of at least ~16k
// multiply-adds), each with its own zeroed buffer of the caller's scratch
template <int Act>
AVX2 void depthwise_act(const Shape &s, const float *x, const float *w, const float *bias, const Epilogue &ep,
                        float *y, int threads) {
    const DepthwiseLayout d(s);
    const int64_t planes = s.n * s.c, per = round8(d.floats()) + 8;
    threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, planes)));
    float *bufs = thread_scratch(0, static_cast<size_t>(threads * per));
    std::fill(bufs, bufs + threads * per, 0.0f);
    const int64_t least = 16384 / std::max<int64_t>(1, s.oh * s.ow * s.kh * s.kw * (s.m / s.group));
    parallel_runs(threads, planes, least, [&](int worker, int64_t i) {
        depthwise_plane<Act>(s, d, bufs + worker * per, x, w, bias, ep, y, i / s.c, i % s.c);
    });
}

// Depthwise weights (one input channel per group, few outputs each): one FMA per tap per
// 8-column vector read in place from the plane's bordered, stride-split copy, the bias,
// residual and activation applied in registers as each vector is stored.
AVX2 void depthwise(const Shape &s, const float *x, const float *w, const float *bias, const Epilogue &ep, float *y,
                    int threads) {
    switch (ep.act) {
        case ACT_RELU: return depthwise_act<ACT_RELU>(s, x, w, bias, ep, y, threads);
        case ACT_CLIP: return depthwise_act<ACT_CLIP>(s, x, w, bias, ep, y, threads);
        case ACT_HARDSWISH: return depthwise_act<ACT_HARDSWISH>(s, x, w, bias, ep, y, threads);
        case ACT_HARDSIGMOID: return depthwise_act<ACT_HARDSIGMOID>(s, x, w, bias, ep, y, threads);
        case ACT_SILU: return depthwise_act<ACT_SILU>(s, x, w, bias, ep, y, threads);
        case ACT_SIGMOID: return depthwise_act<ACT_SIGMOID>(s, x, w, bias, ep, y, threads);
        default: return depthwise_act<ACT_NONE>(s, x, w, bias, ep, y, threads);
    }
}
}  // namespace

AVX2 void epilogue_avx2(const Epilogue &ep, float *y, const float *res, int64_t n) { epilogue8(ep, y, res, n); }

AVX2 void run_avx2(const Shape &s, const float *x, const float *w, const float *bias, const Epilogue &ep, float *y,
                   int threads, const float *winograd, const float *packed) {
    const int64_t cg = s.c / s.group, mg = s.m / s.group;
    // one input channel per group and few outputs each (more fill the register tile's rows)
    if (cg == 1 && s.group > 1 && 2 * mg <= MR) return depthwise(s, x, w, bias, ep, y, threads);
    static const TileKernel kernel{MR,         NR,          KC,         tile_6x16<false>, pack_cols,
                                   epilogue8,  pack_padded, tile_6x16<true>, pack_block,
                                   tile_6x16<false, true>, tile_6x16<true, true>};
    if (winograd_applies(s, winograd)) return run_winograd_avx2(kernel, s, x, w, winograd, bias, ep, y, threads);
    run_tiled(kernel, s, x, w, bias, ep, y, threads, packed);
}
#else
void run_avx2(const Shape &, const float *, const float *, const float *, const Epilogue &, float *, int,
              const float *, const float *) {}
void epilogue_avx2(const Epilogue &, float *, const float *, int64_t) {}
#endif  // ONNX_LIGHT_AVX512

}  // namespace onnx_light_conv
