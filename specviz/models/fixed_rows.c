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
