// The pointwise programs of torch.optim's updates (the optimizer graphs training/_optimizers.py
// emits, as runtime/_fuse_pointwise.py numbers them), compiled: each 8-float vector goes through
// the whole program in registers, in one loop that reads each input and writes each output once.
//
// Why: the interpreter of src/elementwise.cpp runs one operation over a 256-float block at a time,
// so every operation loads two operands and stores its result (AdamW's 14 operations: 42 memory
// operations per vector against 11 loads and 3 stores here), and its divisions and square root
// run in loops of their own, where nothing else overlaps them. AdamW over 401k floats (the MLP's
// first weight): 1.34 ms interpreted, 0.48 ms compiled (benchmarks/bench_pointwise.py).
//
// The code is the program itself (a table of rows op, dst, a, b, as the fuser gives them), unrolled
// by the compiler: the same IEEE float32 operations in the same order, one intrinsic each, and this
// file is compiled with -ffp-contract=off (CMakeLists.txt), so nothing becomes a fused multiply-add
// and the results are bitwise the interpreter's and numpy's. A program not in the table (another
// optimizer's, or these after a change of the emitted graphs) runs interpreted: the same bits,
// more time. tests/runtime/test_pointwise_compiled.py checks that generate_artifacts' updates
// are in the table.
#pragma once

#include <cstdint>
#include <cstring>
#include <utility>

#include "simd.h"

namespace pw_compiled {

struct Instr {
    int32_t op, dst, a, b;  // PointwiseOp of src/elementwise.cpp: 0 Add, 1 Sub, 2 Mul, 3 Div, 4 Sqrt
};

// in[r]: input r's array, or its one value when bit r of the program's ``singles`` is set
using Run = void (*)(const float *const *in, float *const *out, int64_t n);

struct Program {
    int32_t inputs, outputs, temps, length;
    uint32_t singles;  // the inputs that are one value (broadcast), a bit each: the factors of the update
    const Instr *code;
    Run run;
};

#if ONNX_LIGHT_AVX512
template <const Instr *CODE, int J>
AVX2 inline void step(__m256 *r) {
    constexpr Instr c = CODE[J];
    if constexpr (c.op == 0) r[c.dst] = _mm256_add_ps(r[c.a], r[c.b]);
    else if constexpr (c.op == 1) r[c.dst] = _mm256_sub_ps(r[c.a], r[c.b]);
    else if constexpr (c.op == 2) r[c.dst] = _mm256_mul_ps(r[c.a], r[c.b]);
    else if constexpr (c.op == 3) r[c.dst] = _mm256_div_ps(r[c.a], r[c.b]);
    else r[c.dst] = _mm256_sqrt_ps(r[c.a]);
}

// (the pointers and the broadcast values in locals: nothing the loop stores can change them)
template <const Instr *CODE, uint32_t SINGLES, int NIN, int REGS, int... J, int... I, int... O>
AVX2 void run_vectors(const float *const *in, float *const *out, int64_t n, std::integer_sequence<int, J...>,
                      std::integer_sequence<int, I...>, std::integer_sequence<int, O...>) {
    const float *const src[] = {in[I]...};
    float *const dst[] = {out[O]...};
    const __m256 one_value[] = {_mm256_set1_ps(in[I][0])...};
    for (int64_t i = 0; i + 8 <= n; i += 8) {
        __m256 r[REGS];
        ((r[I] = (SINGLES >> I & 1) ? one_value[I] : _mm256_loadu_ps(src[I] + i)), ...);
        (step<CODE, J>(r), ...);
        (_mm256_storeu_ps(dst[O] + i, r[NIN + O]), ...);
    }
}

template <const Instr *CODE, uint32_t SINGLES, int NIN, int NOUT, int TEMPS, int K>
AVX2 void run(const float *const *in, float *const *out, int64_t n) {
    run_vectors<CODE, SINGLES, NIN, NIN + NOUT + TEMPS>(in, out, n, std::make_integer_sequence<int, K>(),
                                                        std::make_integer_sequence<int, NIN>(),
                                                        std::make_integer_sequence<int, NOUT>());
}

// Registers: the inputs (the parameter, its gradient, its states, then one value each:
// learning rate, betas, bias corrections, eps, ...), then the outputs, then the temporaries.
// AdamW (torch.optim's defaults; any weight decay, 0 too)
constexpr Instr ADAMW[] = {
    {2, 14, 0, 1}, {1, 15, 2, 3}, {2, 16, 15, 4}, {0, 11, 3, 16}, {2, 17, 5, 6}, {2, 18, 2, 2},
    {2, 19, 18, 7}, {0, 12, 17, 19}, {4, 20, 12, 12}, {3, 21, 20, 8}, {0, 22, 21, 9}, {3, 23, 11, 22},
    {2, 24, 23, 10}, {1, 13, 14, 24}};
// Adam
constexpr Instr ADAM[] = {
    {1, 13, 0, 1}, {2, 14, 13, 2}, {0, 10, 1, 14}, {2, 15, 3, 4}, {2, 16, 0, 0}, {2, 17, 16, 5},
    {0, 11, 15, 17}, {4, 18, 11, 11}, {3, 19, 18, 6}, {0, 20, 19, 7}, {3, 21, 10, 20}, {2, 22, 21, 8},
    {1, 12, 9, 22}};
// Adam, weight_decay > 0 (added to the gradient)
constexpr Instr ADAM_WEIGHT_DECAY[] = {
    {2, 14, 0, 1}, {0, 15, 2, 14}, {1, 16, 15, 3}, {2, 17, 16, 4}, {0, 11, 3, 17}, {2, 18, 5, 6},
    {2, 19, 15, 15}, {2, 20, 19, 7}, {0, 12, 18, 20}, {4, 21, 12, 12}, {3, 22, 21, 8}, {0, 23, 22, 9},
    {3, 24, 11, 23}, {2, 25, 24, 10}, {1, 13, 0, 25}};
// AdamW, amsgrad (the running maximum is a step of its own)
constexpr Instr ADAMW_AMSGRAD[] = {
    {2, 11, 0, 1}, {1, 12, 2, 3}, {2, 13, 12, 4}, {0, 9, 3, 13}, {4, 14, 5, 5}, {3, 15, 14, 6},
    {0, 16, 15, 7}, {3, 17, 9, 16}, {2, 18, 17, 8}, {1, 10, 11, 18}};
// SGD, momentum and weight_decay
constexpr Instr SGD_MOMENTUM_WEIGHT_DECAY[] = {
    {2, 9, 0, 1}, {0, 10, 2, 9}, {2, 11, 3, 4}, {2, 12, 10, 5}, {0, 7, 11, 12}, {2, 13, 7, 6},
    {1, 8, 0, 13}};
// SGD, Nesterov momentum
constexpr Instr SGD_NESTEROV[] = {
    {2, 8, 0, 1}, {2, 9, 2, 3}, {0, 6, 8, 9}, {2, 10, 6, 1}, {0, 11, 2, 10}, {2, 12, 11, 4},
    {1, 7, 5, 12}};
// AdamW, max_grad_norm (the gradient scaled by the clip factor)
constexpr Instr ADAMW_CLIP[] = {
    {2, 15, 0, 1}, {2, 16, 2, 3}, {1, 17, 15, 4}, {2, 18, 17, 5}, {0, 12, 4, 18}, {2, 19, 6, 7},
    {2, 20, 15, 15}, {2, 21, 20, 8}, {0, 13, 19, 21}, {4, 22, 13, 13}, {3, 23, 22, 9}, {0, 24, 23, 10},
    {3, 25, 12, 24}, {2, 26, 25, 11}, {1, 14, 16, 26}};
// Adam, max_grad_norm
constexpr Instr ADAM_CLIP[] = {
    {2, 14, 0, 1}, {1, 15, 14, 2}, {2, 16, 15, 3}, {0, 11, 2, 16}, {2, 17, 4, 5}, {2, 18, 14, 14},
    {2, 19, 18, 6}, {0, 12, 17, 19}, {4, 20, 12, 12}, {3, 21, 20, 7}, {0, 22, 21, 8}, {3, 23, 11, 22},
    {2, 24, 23, 9}, {1, 13, 10, 24}};
// Adam, amsgrad
constexpr Instr ADAM_AMSGRAD[] = {
    {1, 10, 0, 1}, {2, 11, 10, 2}, {0, 8, 1, 11}, {4, 12, 3, 3}, {3, 13, 12, 4}, {0, 14, 13, 5},
    {3, 15, 8, 14}, {2, 16, 15, 6}, {1, 9, 7, 16}};
// SGD, momentum, weight_decay and max_grad_norm
constexpr Instr SGD_MOMENTUM_WEIGHT_DECAY_CLIP[] = {
    {2, 10, 0, 1}, {2, 11, 2, 3}, {0, 12, 10, 11}, {2, 13, 4, 5}, {2, 14, 12, 6}, {0, 8, 13, 14},
    {2, 15, 8, 7}, {1, 9, 2, 15}};

#define PW_PROGRAM(CODE, NIN, NOUT, TEMPS, SINGLES)                                         \
    Program {                                                                               \
        NIN, NOUT, TEMPS, static_cast<int32_t>(sizeof(CODE) / sizeof(Instr)), SINGLES, CODE, \
            &run<CODE, SINGLES, NIN, NOUT, TEMPS, static_cast<int>(sizeof(CODE) / sizeof(Instr))> \
    }
inline constexpr Program PROGRAMS[] = {
    PW_PROGRAM(ADAMW, 11, 3, 11, 0b11111010010),
    PW_PROGRAM(ADAM, 10, 3, 10, 0b0111110100),
    PW_PROGRAM(ADAM_WEIGHT_DECAY, 11, 3, 12, 0b11111010010),
    PW_PROGRAM(ADAMW_AMSGRAD, 9, 2, 8, 0b111010010),
    PW_PROGRAM(SGD_MOMENTUM_WEIGHT_DECAY, 7, 2, 5, 0b1110010),
    PW_PROGRAM(SGD_NESTEROV, 6, 2, 5, 0b011010),
    PW_PROGRAM(ADAMW_CLIP, 12, 3, 12, 0b111110101010),
    PW_PROGRAM(ADAM_CLIP, 11, 3, 11, 0b01111101010),
    PW_PROGRAM(ADAM_AMSGRAD, 8, 2, 7, 0b01110100),
    PW_PROGRAM(SGD_MOMENTUM_WEIGHT_DECAY_CLIP, 8, 2, 6, 0b11101010),
};
#undef PW_PROGRAM
#endif

// The compiled form of a program of ``length`` rows (op, dst, a, b) whose inputs ``singles``
// (a bit each) are one value, or nullptr.
inline const Program *find(const int32_t *code, int64_t length, int64_t inputs, int64_t outputs, int64_t temps,
                           uint64_t singles) {
#if ONNX_LIGHT_AVX512
    for (const Program &p : PROGRAMS)
        if (p.length == length && p.inputs == inputs && p.outputs == outputs && p.temps == temps &&
            p.singles == singles && std::memcmp(p.code, code, sizeof(Instr) * static_cast<size_t>(length)) == 0)
            return &p;
#else
    (void)code, (void)length, (void)inputs, (void)outputs, (void)temps, (void)singles;
#endif
    return nullptr;
}

}  // namespace pw_compiled
