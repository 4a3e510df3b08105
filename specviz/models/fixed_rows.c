/* y (4, N) = x (4, K) · w (N, K)ᵀ in float32, for specviz.models.fixed_rows (which says why).
 *
 * Each output y[m][n] is one fixed sequence of operations whatever the other rows hold: two 8-lane FMA
 * accumulators over k (even and odd blocks of 8), added lane by lane, then the 8 lanes summed in one fixed
 * order. Each weight row is read once for the 4 rows, so the product runs at memory speed, as one row's does. */
#include <immintrin.h>

#define ROWS 4

static inline float sum_lanes(__m256 v) {
    __m128 low = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 pairs = _mm_add_ps(low, _mm_movehdup_ps(low));
    return _mm_cvtss_f32(_mm_add_ss(pairs, _mm_movehl_ps(pairs, pairs)));
}

/* K a multiple of 16; x, w, y contiguous */
void specviz_rows4(const float *x, const float *w, float *y, long num_out, long num_in) {
    for (long n = 0; n < num_out; n++) {
        const float *weight = w + n * num_in;
        __m256 even[ROWS], odd[ROWS];
        for (int m = 0; m < ROWS; m++) even[m] = odd[m] = _mm256_setzero_ps();
        for (long k = 0; k < num_in; k += 16) {
            __m256 w_even = _mm256_loadu_ps(weight + k), w_odd = _mm256_loadu_ps(weight + k + 8);
            for (int m = 0; m < ROWS; m++) {
                even[m] = _mm256_fmadd_ps(_mm256_loadu_ps(x + m * num_in + k), w_even, even[m]);
                odd[m] = _mm256_fmadd_ps(_mm256_loadu_ps(x + m * num_in + k + 8), w_odd, odd[m]);
            }
        }
        for (int m = 0; m < ROWS; m++) y[m * num_out + n] = sum_lanes(_mm256_add_ps(even[m], odd[m]));
    }
}

/* Attention for a call's rows in float32, for specviz.models.fixed_rows.attend (which says why): for each row s
 * and head h, softmax(scaling·q · K[order[s, j]]ᵀ, j < count_s) · V[order[s, j]], count_s the row's visible keys
 * (a prefix of its order). Each output element is one fixed sequence of operations over its own row's query and
 * its own keys: a score is 8-lane FMAs over the head's dimension then the lanes summed in one order; the softmax
 * takes the max, exp (exp_lanes), their sum in one fixed order (exp_scores), and a division; the output adds
 * w_j · v_j from j = 0 up.
 * Neither the other rows, nor the call's width past count_s, nor the number of rows change any of it. */
#include <math.h>

/* 8 keys' or values' elements as float32, from a float32 cache or a bfloat16 one (bf16 → float32 is exact: the
 * 16 bits become the top half of the float's) */
static inline __m256 load_cached(const void *base, long index, int bf16) {
    if (bf16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const unsigned short *)base + index))), 16));
    return _mm256_loadu_ps((const float *)base + index);
}

static inline float dot_scaled(const float *q, const void *keys, long at, long head_dim, int bf16) {
    __m256 acc = _mm256_setzero_ps();
    for (long d = 0; d < head_dim; d += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load_cached(keys, at + d, bf16), acc);
    return sum_lanes(acc);
}

/* exp of 8 lanes at once, each lane by one fixed sequence of operations on its own value (Cephes' expf: x = n·ln 2
 * + r, a degree-7 polynomial in r, times 2^n; within 2 ulp of libm's expf over the softmax's x ≤ 0): libm's expf,
 * one value a call, was a third of the attention over a long text. */
static inline __m256 exp_lanes(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.33654f)), _mm256_set1_ps(88.37626f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i scale = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(scale));
}

/* The largest of scores[0 … count − 1], 8 lanes at a time, then the lanes, then the last few: the largest is the
 * same value in any order, so this is the scalar loop's result in an eighth of the steps. */
static inline float max_score(const float *scores, long count) {
    __m256 tops = _mm256_set1_ps(-INFINITY);
    long j = 0;
    for (; j + 8 <= count; j += 8) tops = _mm256_max_ps(tops, _mm256_loadu_ps(scores + j));
    float lanes[8], top = -INFINITY;
    _mm256_storeu_ps(lanes, tops);
    for (int i = 0; i < 8; i++)
        if (lanes[i] > top) top = lanes[i];
    for (; j < count; j++)
        if (scores[j] > top) top = scores[j];
    return top;
}

/* scores[j] = exp(scores[j] − top) for j < count, 8 at a time; the last few through the same 8-lane code (copied
 * out and back), so every score takes exp_lanes whatever its place. Returns their sum in one fixed order for each
 * count: lane i adds the scores j ≡ i (mod 8) of the whole runs of 8 from j = 0 up, sum_lanes adds the lanes, then
 * the last few are added in turn. A sum from j = 0 up, one score at a time, waited on each add's latency: over a
 * long text it cost a verify more than the exp did. */
static inline float exp_scores(float *scores, long count, float top) {
    __m256 tops = _mm256_set1_ps(top), sums = _mm256_setzero_ps();
    long j = 0;
    for (; j + 8 <= count; j += 8) {
        __m256 weights = exp_lanes(_mm256_sub_ps(_mm256_loadu_ps(scores + j), tops));
        _mm256_storeu_ps(scores + j, weights);
        sums = _mm256_add_ps(sums, weights);
    }
    float total = sum_lanes(sums);
    if (j < count) {
        float tail[8] = {0};
        for (long i = j; i < count; i++) tail[i - j] = scores[i];
        _mm256_storeu_ps(tail, exp_lanes(_mm256_sub_ps(_mm256_loadu_ps(tail), tops)));
        for (long i = j; i < count; i++) total += scores[i] = tail[i - j];
    }
    return total;
}

/* scores[j] /= total for j < count: 8 divisions at a time, each the IEEE quotient a scalar division gives. */
static inline void divide_scores(float *scores, long count, float total) {
    __m256 totals = _mm256_set1_ps(total);
    long j = 0;
    for (; j + 8 <= count; j += 8) _mm256_storeu_ps(scores + j, _mm256_div_ps(_mm256_loadu_ps(scores + j), totals));
    for (; j < count; j++) scores[j] = scores[j] / total;
}

/* The scores of KEYS_AT_ONCE keys for one query: each exactly dot_scaled's sequence (its own accumulator, the same
 * FMAs over d, the lanes summed in the same order), computed side by side. One key's chain of dependent FMAs left
 * the core waiting on each FMA's latency; eight independent chains keep it busy, and the query is loaded once. */
#define KEYS_AT_ONCE 8
static inline void dot_scaled_keys(const float *q, const void *keys, const long *at, long head_dim, int bf16,
                                   float *scores) {
    __m256 acc[KEYS_AT_ONCE];
    for (int i = 0; i < KEYS_AT_ONCE; i++) acc[i] = _mm256_setzero_ps();
    for (long d = 0; d < head_dim; d += 8) {
        __m256 q_d = _mm256_loadu_ps(q + d);
        for (int i = 0; i < KEYS_AT_ONCE; i++) acc[i] = _mm256_fmadd_ps(q_d, load_cached(keys, at[i] + d, bf16), acc[i]);
    }
    for (int i = 0; i < KEYS_AT_ONCE; i++) scores[i] = sum_lanes(acc[i]);
}

/* Σ_j weight_j · v_j over keys first..stop-1 added to out, from j = first up, each of the BLOCKS 8-lane blocks in a
 * register instead of stored and loaded at every key: the very FMAs, in the same order, on the same values (a
 * float32 stored and loaded between two runs of keys is unchanged). BLOCKS is a constant at each call, so the
 * compiler keeps the blocks in registers. */
static inline __attribute__((always_inline)) void weigh_values(const float *weights, const void *values, long head,
                                                               const long *slots, long kv_pos_stride, long first,
                                                               long stop, float *out, int bf16, const int blocks) {
    __m256 sum[16];
    for (int b = 0; b < blocks; b++) sum[b] = _mm256_loadu_ps(out + 8 * b);
    for (long j = first; j < stop; j++) {
        __m256 weight = _mm256_set1_ps(weights[j]);
        long at = head + slots[j] * kv_pos_stride;
        for (int b = 0; b < blocks; b++) sum[b] = _mm256_fmadd_ps(weight, load_cached(values, at + 8 * b, bf16), sum[b]);
    }
    for (int b = 0; b < blocks; b++) _mm256_storeu_ps(out + 8 * b, sum[b]);
}

static void weigh_values_any(const float *weights, const void *values, long head, const long *slots,
                             long kv_pos_stride, long first, long stop, float *out, int bf16, long head_dim) {
    if (head_dim == 64) {
        weigh_values(weights, values, head, slots, kv_pos_stride, first, stop, out, bf16, 8);
    } else if (head_dim == 128) {
        weigh_values(weights, values, head, slots, kv_pos_stride, first, stop, out, bf16, 16);
    } else {
        for (long j = first; j < stop; j++) {
            __m256 weight = _mm256_set1_ps(weights[j]);
            long at = head + slots[j] * kv_pos_stride;
            for (long d = 0; d < head_dim; d += 8)
                _mm256_storeu_ps(out + d, _mm256_fmadd_ps(weight, load_cached(values, at + d, bf16),
                                                          _mm256_loadu_ps(out + d)));
        }
    }
}

#define VALUES_AT_ONCE 32  /* keys whose values every query of a KV head takes in turn: 8 kB at D = 64, in L1 */

/* query (S, H, D) float32 at the strides given (D contiguous); keys and values (kv, L, D), float32 or bfloat16
 * (`bf16`), at the strides given (in elements); order (S, W) and visible (S, W) contiguous; out (S, H, D) float32
 * contiguous; scratch: S·H·(W + D) floats. D a multiple of 8. A bfloat16 cache is read as the float32 values it
 * holds, so both precisions run this one sequence of float32 operations.
 * Why the loops run in this order: every query head of a KV head (GQA's group), in every row of the call, reads
 * the same keys and values, so each run of keys is fetched once and used by all of them while it is in L1 (over a
 * long text a head's keys outgrow L2, and reading them once per query head made attention the step's largest
 * cost). The order only says when each (row, head)'s operations run, never which: each keeps its own sequence. */
static inline void attend_rows(const float *query, long q_row_stride, long q_head_stride,
                               const void *keys, const void *values, long kv_head_stride, long kv_pos_stride,
                               const long *order, const unsigned char *visible, long width,
                               float *out, float *scratch, long num_rows, long num_heads, long num_kv_heads,
                               long head_dim, float scaling, int bf16) {
    float *scores = scratch, *q = scratch + num_rows * num_heads * width;  /* (S, H, W) and (S, H, D) */
    long group = num_heads / num_kv_heads, most = 0;
    long counts[num_rows];
    for (long s = 0; s < num_rows; s++) {
        long count = 0;
        while (count < width && visible[s * width + count]) count++;
        counts[s] = count;
        if (count > most) most = count;
        for (long h = 0; h < num_heads; h++) {
            const float *query_row = query + s * q_row_stride + h * q_head_stride;
            for (long d = 0; d < head_dim; d++) q[(s * num_heads + h) * head_dim + d] = query_row[d] * scaling;
        }
    }
    for (long kv = 0; kv < num_kv_heads; kv++) {
        long head = kv * kv_head_stride;
        for (long first = 0; first < most; first += KEYS_AT_ONCE) {  /* the scores, a run of keys at a time */
            for (long s = 0; s < num_rows; s++) {
                const long *slots = order + s * width;
                long stop = first + KEYS_AT_ONCE < counts[s] ? first + KEYS_AT_ONCE : counts[s];
                long at[KEYS_AT_ONCE];
                for (long i = first; i < stop; i++) at[i - first] = head + slots[i] * kv_pos_stride;
                for (long h = kv * group; h < (kv + 1) * group; h++) {
                    float *row_scores = scores + (s * num_heads + h) * width;
                    const float *q_row = q + (s * num_heads + h) * head_dim;
                    if (stop - first == KEYS_AT_ONCE) {
                        dot_scaled_keys(q_row, keys, at, head_dim, bf16, row_scores + first);
                    } else {
                        for (long i = first; i < stop; i++)
                            row_scores[i] = dot_scaled(q_row, keys, at[i - first], head_dim, bf16);
                    }
                }
            }
        }
        for (long s = 0; s < num_rows; s++) {  /* each (row, head)'s softmax: the max, exp and their sum, a division */
            for (long h = kv * group; h < (kv + 1) * group; h++) {
                float *row_scores = scores + (s * num_heads + h) * width;
                float total = exp_scores(row_scores, counts[s], max_score(row_scores, counts[s]));
                divide_scores(row_scores, counts[s], total);  /* the weights */
                float *row_out = out + (s * num_heads + h) * head_dim;
                for (long d = 0; d < head_dim; d += 8) _mm256_storeu_ps(row_out + d, _mm256_setzero_ps());
            }
        }
        for (long first = 0; first < most; first += VALUES_AT_ONCE) {  /* the values, a run of keys at a time */
            for (long s = 0; s < num_rows; s++) {
                long stop = first + VALUES_AT_ONCE < counts[s] ? first + VALUES_AT_ONCE : counts[s];
                if (stop <= first) continue;
                for (long h = kv * group; h < (kv + 1) * group; h++)
                    weigh_values_any(scores + (s * num_heads + h) * width, values, head, order + s * width,
                                     kv_pos_stride, first, stop, out + (s * num_heads + h) * head_dim, bf16, head_dim);
            }
        }
    }
}

void specviz_attend(const float *query, long q_row_stride, long q_head_stride,
                    const float *keys, const float *values, long kv_head_stride, long kv_pos_stride,
                    const long *order, const unsigned char *visible, long width,
                    float *out, float *scratch, long num_rows, long num_heads, long num_kv_heads, long head_dim,
                    float scaling) {
    attend_rows(query, q_row_stride, q_head_stride, keys, values, kv_head_stride, kv_pos_stride, order, visible,
                width, out, scratch, num_rows, num_heads, num_kv_heads, head_dim, scaling, 0);
}

void specviz_attend_bf16(const float *query, long q_row_stride, long q_head_stride,
                         const unsigned short *keys, const unsigned short *values, long kv_head_stride,
                         long kv_pos_stride, const long *order, const unsigned char *visible, long width,
                         float *out, float *scratch, long num_rows, long num_heads, long num_kv_heads, long head_dim,
                         float scaling) {
    attend_rows(query, q_row_stride, q_head_stride, keys, values, kv_head_stride, kv_pos_stride, order, visible,
                width, out, scratch, num_rows, num_heads, num_kv_heads, head_dim, scaling, 1);
}

/* The same product with the weights read from a GGUF file's own blocks (specviz.models.gguf_rows says why):
 * each block of 32 weights along a weight row is turned back into the very float32 values transformers' GGUF
 * reader wrote (q4_1: d·q then + m, two roundings, as numpy computes them; q8_0: q·d, exact), then multiplied
 * exactly as specviz_rows4 multiplies: the same two accumulators over the same k order, so each output is
 * bitwise specviz_rows4's over the dequantised weights, in a fifth of the bytes read.
 *
 * Blocks as specviz.models.gguf_rows repacks them, per weight row, 32 weights each:
 *   q4_1: float d, float m, 16 bytes (weight j < 16: byte j's low nibble; j ≥ 16: byte j − 16's high one): 24 bytes
 *   q8_0: float d, 32 signed bytes: 36 bytes */
#include <string.h>

#define Q4_1_BYTES 24
#define Q8_0_BYTES 36

static inline float scale_at(const unsigned char *block, int offset) {
    float value;
    memcpy(&value, block + offset, sizeof value);
    return value;
}

/* weights 8·part … 8·part + 7 of a q4_1 block, part 0 … 3 */
static inline __m256 q4_1_weights(const unsigned char *block, int part) {
    __m128i bytes = _mm_loadl_epi64((const __m128i *)(block + 8 + 8 * (part & 1)));
    if (part >= 2) bytes = _mm_srli_epi16(bytes, 4);
    bytes = _mm_and_si128(bytes, _mm_set1_epi8(0x0F));
    __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
    return _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(scale_at(block, 0)), q), _mm256_set1_ps(scale_at(block, 4)));
}

/* weights 8·part … 8·part + 7 of a q8_0 block */
static inline __m256 q8_0_weights(const unsigned char *block, int part) {
    __m128i bytes = _mm_loadl_epi64((const __m128i *)(block + 4 + 8 * part));
    __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
    return _mm256_mul_ps(q, _mm256_set1_ps(scale_at(block, 0)));
}

#define ROWS4_OVER_BLOCKS(NAME, BYTES, WEIGHTS)                                                                 \
    void NAME(const float *x, const unsigned char *blocks, float *y, long num_out, long num_in) {               \
        long num_blocks = num_in / 32;                                                                         \
        for (long n = 0; n < num_out; n++) {                                                                   \
            const unsigned char *row = blocks + n * num_blocks * BYTES;                                        \
            __m256 even[ROWS], odd[ROWS];                                                                      \
            for (int m = 0; m < ROWS; m++) even[m] = odd[m] = _mm256_setzero_ps();                             \
            for (long b = 0; b < num_blocks; b++) {                                                            \
                const unsigned char *block = row + b * BYTES;                                                  \
                for (int half = 0; half < 2; half++) { /* k = 32b + 16·half, as specviz_rows4 steps */        \
                    long k = 32 * b + 16 * half;                                                               \
                    __m256 w_even = WEIGHTS(block, 2 * half), w_odd = WEIGHTS(block, 2 * half + 1);            \
                    for (int m = 0; m < ROWS; m++) {                                                           \
                        even[m] = _mm256_fmadd_ps(_mm256_loadu_ps(x + m * num_in + k), w_even, even[m]);       \
                        odd[m] = _mm256_fmadd_ps(_mm256_loadu_ps(x + m * num_in + k + 8), w_odd, odd[m]);      \
                    }                                                                                          \
                }                                                                                              \
            }                                                                                                  \
            for (int m = 0; m < ROWS; m++) y[m * num_out + n] = sum_lanes(_mm256_add_ps(even[m], odd[m]));     \
        }                                                                                                      \
    }

ROWS4_OVER_BLOCKS(specviz_rows4_q4_1, Q4_1_BYTES, q4_1_weights)
ROWS4_OVER_BLOCKS(specviz_rows4_q8_0, Q8_0_BYTES, q8_0_weights)

/* The weights the products above multiply by, written out (num_out, num_in): what the load compares bitwise
 * with the float32 weights before a layer may read its blocks. */
#define DEQUANTISE(NAME, BYTES, WEIGHTS)                                                                       \
    void NAME(const unsigned char *blocks, float *out, long num_out, long num_in) {                            \
        long num_blocks = num_in / 32;                                                                         \
        for (long n = 0; n < num_out; n++)                                                                     \
            for (long b = 0; b < num_blocks; b++)                                                              \
                for (int part = 0; part < 4; part++)                                                           \
                    _mm256_storeu_ps(out + n * num_in + 32 * b + 8 * part,                                     \
                                     WEIGHTS(blocks + (n * num_blocks + b) * BYTES, part));                    \
    }

DEQUANTISE(specviz_dequantise_q4_1, Q4_1_BYTES, q4_1_weights)
DEQUANTISE(specviz_dequantise_q8_0, Q8_0_BYTES, q8_0_weights)

/* The same products with 16-lane registers, for CPUs with AVX-512 (specviz.models.fixed_rows picks them where torch
 * runs AVX-512): bitwise the 8-lane kernels' results, by construction. The 8-lane kernels keep two accumulators per
 * row, `even` for inputs k … k + 7 and `odd` for k + 8 … k + 15 of each step of 16; here one 16-lane accumulator
 * holds both, lane i < 8 doing exactly even's lane i and lane 8 + i exactly odd's lane i (the same FMAs on the same
 * values in the same k order), and the two halves are added lane by lane and summed by sum_lanes as there. Half
 * the instructions: the block kernels were bound by their arithmetic on an Intel Xeon, not by reading. */
#define WIDE __attribute__((target("avx512f")))

static inline WIDE float sum_halves(__m512 acc) {
    __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
    return sum_lanes(_mm256_add_ps(_mm512_castps512_ps256(acc), high));
}

/* Two weight rows per pass (8 accumulators: one row's 4 wait on the FMA's latency), then any last one alone:
 * each accumulator's sequence of FMAs is the same either way. */
void WIDE specviz_rows4_wide(const float *x, const float *w, float *y, long num_out, long num_in) {
    for (long n = 0; n < num_out; n += 2) {
        int pair = n + 1 < num_out;
        const float *first = w + n * num_in, *second = first + pair * num_in;
        __m512 acc[2][ROWS];
        for (int m = 0; m < ROWS; m++) acc[0][m] = acc[1][m] = _mm512_setzero_ps();
        for (long k = 0; k < num_in; k += 16) {
            __m512 w0 = _mm512_loadu_ps(first + k), w1 = _mm512_loadu_ps(second + k);
            for (int m = 0; m < ROWS; m++) {
                __m512 input = _mm512_loadu_ps(x + m * num_in + k);
                acc[0][m] = _mm512_fmadd_ps(input, w0, acc[0][m]);
                acc[1][m] = _mm512_fmadd_ps(input, w1, acc[1][m]);
            }
        }
        for (int m = 0; m < ROWS; m++) {
            y[m * num_out + n] = sum_halves(acc[0][m]);
            if (pair) y[m * num_out + n + 1] = sum_halves(acc[1][m]);
        }
    }
}

/* weights 16·half … 16·half + 15 of a q4_1 block: q4_1_weights' parts 2·half and 2·half + 1 */
static inline WIDE __m512 q4_1_weights16(const unsigned char *block, int half) {
    __m128i bytes = _mm_loadu_si128((const __m128i *)(block + 8));
    if (half) bytes = _mm_srli_epi16(bytes, 4);
    bytes = _mm_and_si128(bytes, _mm_set1_epi8(0x0F));
    __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(bytes));
    return _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(scale_at(block, 0)), q), _mm512_set1_ps(scale_at(block, 4)));
}

/* weights 16·half … 16·half + 15 of a q8_0 block */
static inline WIDE __m512 q8_0_weights16(const unsigned char *block, int half) {
    __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(block + 4 + 16 * half))));
    return _mm512_mul_ps(q, _mm512_set1_ps(scale_at(block, 0)));
}

#define WIDE_ROWS4_OVER_BLOCKS(NAME, BYTES, WEIGHTS)                                                            \
    void WIDE NAME(const float *x, const unsigned char *blocks, float *y, long num_out, long num_in) {          \
        long num_blocks = num_in / 32;                                                                         \
        for (long n = 0; n < num_out; n += 2) { /* two weight rows per pass, as specviz_rows4_wide */          \
            int pair = n + 1 < num_out;                                                                        \
            const unsigned char *first = blocks + n * num_blocks * BYTES;                                      \
            const unsigned char *second = first + pair * num_blocks * BYTES;                                   \
            __m512 acc[2][ROWS];                                                                               \
            for (int m = 0; m < ROWS; m++) acc[0][m] = acc[1][m] = _mm512_setzero_ps();                        \
            for (long b = 0; b < num_blocks; b++) {                                                            \
                for (int half = 0; half < 2; half++) {                                                         \
                    long k = 32 * b + 16 * half;                                                               \
                    __m512 w0 = WEIGHTS(first + b * BYTES, half), w1 = WEIGHTS(second + b * BYTES, half);      \
                    for (int m = 0; m < ROWS; m++) {                                                           \
                        __m512 input = _mm512_loadu_ps(x + m * num_in + k);                                    \
                        acc[0][m] = _mm512_fmadd_ps(input, w0, acc[0][m]);                                     \
                        acc[1][m] = _mm512_fmadd_ps(input, w1, acc[1][m]);                                     \
                    }                                                                                          \
                }                                                                                              \
            }                                                                                                  \
            for (int m = 0; m < ROWS; m++) {                                                                   \
                y[m * num_out + n] = sum_halves(acc[0][m]);                                                    \
                if (pair) y[m * num_out + n + 1] = sum_halves(acc[1][m]);                                      \
            }                                                                                                  \
        }                                                                                                      \
    }

WIDE_ROWS4_OVER_BLOCKS(specviz_rows4_q4_1_wide, Q4_1_BYTES, q4_1_weights16)
WIDE_ROWS4_OVER_BLOCKS(specviz_rows4_q8_0_wide, Q8_0_BYTES, q8_0_weights16)
