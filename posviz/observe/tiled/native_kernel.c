/* The tiled attention statistics of one head as a compiled CPU loop (see native.py; the same sums as kernel.py).
 *
 * For each tile of TQ queries, over the keys each query may see, in chunks of JC keys (the chunk of transposed keys,
 * d x JC floats, stays in the L1 cache while the tile's rows use it):
 *   A. the logits, once: the online softmax (each query's largest logit m and sum l of exp(s - m), rescaled when m
 *      grows) and, in the same shift, the sum of e * s (entropy) and the mass by distance bin; the exponentials e
 *      are kept for the tile (TQ x n floats at most) with the shift of their chunk;
 *   B. the weights a_ij = e_ij exp(shift - lse_i) into the row sums (mass, squares) and the sums over queries:
 *      attention received by each key (float within the tile), the diagonal sums (the offset profile), the map
 *      and the sink (double).
 * Sums across tiles are double; logits and weights float (the precision of the model's own attention), as in the
 * PyTorch tiles. Keys outside the support are never visited (loop bounds), so no -inf enters the arithmetic (this
 * file is compiled with -ffast-math; the library is linked without it, see native.py).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TQ 32
#define JC 256

typedef struct {
    int64_t n, d, map;          /* positions, head dimension, side of the map (n: exact) */
    float scale, softcap;       /* softcap 0: none */
    int64_t causal, window;     /* window 0: none */
    const int64_t *edges;       /* distance bin edges, bins + 1 of them */
    const int64_t *bin_of;      /* distance -> bin */
    int64_t bins;
} Params;

typedef struct {                /* one head's sums (double), as TiledSums */
    double *offsets, *row_mass, *row_sq, *row_sum_sq, *entropy, *max_weight, *received, *sink, *span50, *span90, *map;
} Sums;

static inline int64_t lo_key(const Params *p, int64_t i) {
    return p->window ? (i - p->window + 1 > 0 ? i - p->window + 1 : 0) : 0;
}

static inline int64_t hi_key(const Params *p, int64_t i) {
    if (p->causal) return i + 1;
    return p->window ? (i + p->window < p->n ? i + p->window : p->n) : p->n;
}

/* Sixteen floats in one vector (GCC and clang vector extensions: one AVX-512 register, two AVX ones, four NEON). */
typedef float v16f __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));

static inline v16f load16(const float *x) { v16f v; memcpy(&v, x, sizeof v); return v; }
static inline v8f load8(const float *x) { v8f v; memcpy(&v, x, sizeof v); return v; }

/* s[0 .. len) = cap(scale * q . k_j) for keys j0 .. j0 + len; kt is d x n (transposed keys). Sixty-four keys at a
 * time in four vector accumulators, so that the sums stay in registers across the head dimension. */
static inline void logits(const Params *p, const float *restrict q, const float *restrict kt, int64_t j0, int64_t len,
                          float *restrict s) {
    const int64_t n = p->n, d = p->d;
    int64_t j = 0;
    for (; j + 64 <= len; j += 64) {
        v16f a[4] = {{0}};
        const float *restrict k = kt + j0 + j;
        for (int64_t c = 0; c < d; c++, k += n) {
            const float qc = q[c];
            for (int u = 0; u < 4; u++) a[u] += qc * load16(k + 16 * u);
        }
        memcpy(s + j, a, sizeof a);
    }
    for (; j + 8 <= len; j += 8) {
        v8f a = {0};
        const float *restrict k = kt + j0 + j;
        for (int64_t c = 0; c < d; c++, k += n) a += q[c] * load8(k);
        memcpy(s + j, &a, sizeof a);
    }
    for (; j < len; j++) {
        float t = 0.0f;
        for (int64_t c = 0; c < d; c++) t += q[c] * kt[c * n + j0 + j];
        s[j] = t;
    }
    for (j = 0; j < len; j++) s[j] *= p->scale;
    if (p->softcap > 0.0f) {
        const float c = p->softcap, inv = 1.0f / p->softcap;
        for (j = 0; j < len; j++) s[j] = c * tanhf(s[j] * inv);
    }
}

/* The smallest distance D whose keys hold `target` of a query's mass (mass by bin `bd`), as kernel.py's _spans. */
static int64_t span_of(const Params *p, const double *bd, double target) {
    double cum = 0.0, before = 0.0;
    int64_t m = p->bins - 1;
    for (int64_t b = 0; b < p->bins; b++) {
        before = cum;
        cum += bd[b];
        if (cum >= target) { m = b; break; }
        if (b == p->bins - 1) before = cum - bd[b];
    }
    double inside = bd[m] > 2.2250738585072014e-308 ? bd[m] : 2.2250738585072014e-308;
    double frac = (target - before) / inside;
    frac = frac < 0.0 ? 0.0 : (frac > 1.0 ? 1.0 : frac);
    int64_t lo = p->edges[m], width = p->edges[m + 1] - p->edges[m];
    int64_t step = (int64_t)ceil(frac * (double)width);
    int64_t span = lo + (step < 1 ? 1 : step) - 1;
    int64_t last = p->edges[p->bins] - 1;
    return span < 0 ? 0 : (span > last ? last : span);
}

/* Add a[0 .. len) (keys j0 ..) of query i to its mass by distance bin. */
static inline void add_bins(const Params *p, int64_t i, int64_t j0, int64_t len, const float *restrict a, double *restrict bd) {
    int64_t j = j0, end = j0 + len;
    while (j < end) {
        int64_t dist = i >= j ? i - j : j - i;
        int64_t b = p->bin_of[dist];
        int64_t stop;  /* first key past this bin's run */
        if (j <= i) {  /* distances fall as j rises: the bin ends where the distance drops below edges[b] */
            stop = i - p->edges[b] + 1;
        } else {       /* distances rise: the bin ends where the distance reaches edges[b + 1] */
            stop = i + p->edges[b + 1];
        }
        if (stop > end) stop = end;
        if (stop <= j) stop = j + 1;
        double t = 0.0;
        for (int64_t x = j; x < stop; x++) t += a[x - j0];
        bd[b] += t;
        j = stop;
    }
}

/* Add a[0 .. len) (keys j0 ..) of query i to the map: exact, or pooled into map x map cells, cell c holding the keys
 * first[c] .. first[c + 1] - 1 (the keys j with j * map / n == c). */
static inline void add_map(const Params *p, const int64_t *first, int64_t i, int64_t j0, int64_t len, const float *restrict a,
                           double *restrict map) {
    const int64_t m = p->map, n = p->n;
    if (m == n) {
        double *restrict row = map + i * n + j0;
        for (int64_t j = 0; j < len; j++) row[j] += a[j];
        return;
    }
    double *restrict row = map + (i * m / n) * m;
    int64_t c = j0 * m / n, j = j0;
    const int64_t end = j0 + len;
    while (j < end) {
        const int64_t stop = first[c + 1] < end ? first[c + 1] : end;
        double t = 0.0;
        for (int64_t x = j; x < stop; x++) t += a[x - j0];
        row[c++] += t;
        j = stop;
    }
}

/* One block of one head: q is n x d, kt is d x n; adds into `out`. Returns 0, or -1 when memory ran out. */
int posviz_head_statistics(const Params *p, const float *q, const float *kt, Sums *out) {
    const int64_t n = p->n, d = p->d, bins = p->bins, chunks = (n + JC - 1) / JC;
    float *s = malloc(sizeof(float) * JC), *e = malloc(sizeof(float) * (size_t)(TQ * n));
    float *shift = malloc(sizeof(float) * (size_t)(TQ * chunks));
    float *received = malloc(sizeof(float) * (size_t)n);
    double *diag = malloc(sizeof(double) * (size_t)(n + TQ));
    double *bd = malloc(sizeof(double) * (size_t)(TQ * bins));
    int64_t *first = malloc(sizeof(int64_t) * (size_t)(p->map + 1));
    if (!s || !e || !shift || !received || !diag || !bd || !first) {
        free(s); free(e); free(shift); free(received); free(diag); free(bd); free(first);
        return -1;
    }
    for (int64_t c = 0; c <= p->map; c++) first[c] = (c * n + p->map - 1) / p->map;  /* ceil(c n / map) */
    double m[TQ], l[TQ], w[TQ], lse[TQ], mass[TQ], sq[TQ];
    int seen[TQ];
    for (int64_t i0 = 0; i0 < n; i0 += TQ) {
        const int64_t i1 = i0 + TQ < n ? i0 + TQ : n, rows = i1 - i0;
        int64_t jlo = n, jhi = 0;
        for (int64_t i = i0; i < i1; i++) {
            if (lo_key(p, i) < jlo) jlo = lo_key(p, i);
            if (hi_key(p, i) > jhi) jhi = hi_key(p, i);
        }
        const int64_t width = jhi - jlo;
        for (int64_t r = 0; r < rows; r++) { seen[r] = 0; l[r] = w[r] = mass[r] = sq[r] = 0.0; }
        memset(bd, 0, sizeof(double) * (size_t)(rows * bins));
        /* A: the logits, once */
        for (int64_t c0 = jlo; c0 < jhi; c0 += JC) {
            const int64_t c1 = c0 + JC < jhi ? c0 + JC : jhi, ci = (c0 - jlo) / JC;
            for (int64_t r = 0; r < rows; r++) {
                const int64_t i = i0 + r, j0 = lo_key(p, i) > c0 ? lo_key(p, i) : c0, j1 = hi_key(p, i) < c1 ? hi_key(p, i) : c1;
                if (j1 <= j0) continue;
                const int64_t len = j1 - j0;
                double *restrict row_bins = bd + r * bins;
                logits(p, q + i * d, kt, j0, len, s);
                float top = s[0];
                for (int64_t j = 1; j < len; j++) top = s[j] > top ? s[j] : top;
                if (!seen[r]) {
                    m[r] = top;
                    seen[r] = 1;
                } else if (top > m[r]) {  /* a larger logit: rescale what was summed in the old shift */
                    const double f = exp(m[r] - (double)top);
                    l[r] *= f; w[r] *= f;
                    for (int64_t b = 0; b < bins; b++) row_bins[b] *= f;
                    m[r] = top;
                }
                const float at = (float)m[r];
                float *restrict ev = e + r * width + (j0 - jlo);
                float tl = 0.0f, tw = 0.0f;
                for (int64_t j = 0; j < len; j++) {
                    const float x = expf(s[j] - at);
                    ev[j] = x;
                    tl += x;
                    tw += x * s[j];
                }
                l[r] += tl; w[r] += tw;
                shift[r * chunks + ci] = at;
                add_bins(p, i, j0, len, ev, row_bins);
            }
        }
        /* B: the weights into the sums over queries */
        const int64_t k0 = jlo - (i1 - 1);  /* the tile's lowest offset j - i */
        memset(received + jlo, 0, sizeof(float) * (size_t)width);
        memset(diag, 0, sizeof(double) * (size_t)(width + rows));
        for (int64_t r = 0; r < rows; r++) {
            const int64_t i = i0 + r;
            lse[r] = m[r] + log(l[r]);
            for (int64_t c0 = jlo; c0 < jhi; c0 += JC) {
                const int64_t c1 = c0 + JC < jhi ? c0 + JC : jhi, ci = (c0 - jlo) / JC;
                const int64_t j0 = lo_key(p, i) > c0 ? lo_key(p, i) : c0, j1 = hi_key(p, i) < c1 ? hi_key(p, i) : c1;
                if (j1 <= j0) continue;
                const int64_t len = j1 - j0;
                const float f = (float)exp((double)shift[r * chunks + ci] - lse[r]);
                const float *restrict ev = e + r * width + (j0 - jlo);
                float *restrict rec = received + j0;
                double *restrict dg = diag + (j0 - i - k0);
                double tm = 0.0, ts = 0.0;
                for (int64_t j = 0; j < len; j++) {
                    const float a = ev[j] * f;
                    s[j] = a;
                    rec[j] += a;
                    dg[j] += a;
                    tm += a;
                    ts += (double)a * (double)a;
                }
                mass[r] += tm; sq[r] += ts;
                if (j0 == 0 && i >= 1) out->sink[0] += s[0];
                add_map(p, first, i, j0, len, s, out->map);
            }
        }
        for (int64_t j = jlo; j < jhi; j++) out->received[j] += received[j];
        for (int64_t t = 0; t < width + rows - 1; t++) out->offsets[k0 + n - 1 + t] += diag[t];
        for (int64_t r = 0; r < rows; r++) {
            const int64_t i = i0 + r;
            /* the mass and squares of the weights as they went into the sums over queries (float rounding and all):
             * Toeplitz scores and the positional share difference them with the diagonal sums */
            const double g = exp(m[r] - lse[r]);  /* 1 / l: the largest weight */
            out->row_mass[i] += mass[r];
            out->row_sq[i] += sq[r];
            out->row_sum_sq[i] += mass[r] * mass[r];
            out->entropy[i] += lse[r] * mass[r] - w[r] * g;
            out->max_weight[i] += g;
            if (i >= 1) {
                double *row_bins = bd + r * bins;
                for (int64_t b = 0; b < bins; b++) row_bins[b] *= g;
                out->span50[span_of(p, row_bins, mass[r] * 0.5)] += 1.0;
                out->span90[span_of(p, row_bins, mass[r] * 0.9)] += 1.0;
            }
        }
    }
    free(s); free(e); free(shift); free(received); free(diag); free(bd); free(first);
    return 0;
}
