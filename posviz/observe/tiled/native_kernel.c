/* The tiled attention statistics of one head as a compiled CPU loop (see native.py; the same sums as kernel.py).
 *
 * For each tile of TQ queries, over the keys each query may see, in chunks of up to JC keys (the chunk of transposed
 * keys, d x chunk floats, stays in the L1 cache while the tile's rows use it):
 *   A. the logits, once, four rows at a time (each vector of keys loaded once for four queries): the online softmax
 *      (each query's largest logit m and sum l of exp(s - m), rescaled when m grows) and, in the same shift, the sum
 *      of e * (m - s) (the entropy is log l + that sum / l: two terms >= 0, where lse - sum a s would cancel the
 *      digits of a peaked row with large logits) and the mass by distance bin; the exponentials e are kept for the
 *      tile (TQ x n floats at most) with the shift of their chunk;
 *   B. the weights a_ij = e_ij exp(shift - lse_i) into the row sums (mass, squares), the diagonal sums (the offset
 *      profile) and the attention received by each key, summed in float over the queries of one row of the map and
 *      then added to the received sums and pooled into that row of the map (double).
 * Sums across tiles are double; logits and weights float (the precision of the model's own attention), as in the
 * PyTorch tiles. The row mass, squares and diagonal sums are summed in double from the float weights: the positional
 * share differences them, and float sums there, even over the 32 rows of one tile or a row's chunk, put it 1e-4 off
 * for near-uniform heads (a float sweep of the one pass was 13 % faster, and failed that test). Keys outside the
 * support are never visited (loop bounds), so no -inf enters the arithmetic (this file is compiled with -ffast-math;
 * the library is linked without it, see native.py).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TQ 32
#define REDO 4e-6  /* one pass: a tile whose weights' sums are further than this from 1 is summed again, normalised
                    * (within the 1e-5 promised against eager maps; logits near 16 are off by about 1e-6) */
#define JC 512     /* keys per chunk at most: fewer where d x JC floats would not fit in 32 KiB (chunk_keys) */

typedef struct {
    int64_t n, d, map;          /* positions, head dimension, side of the map (n: exact) */
    float scale, softcap;       /* softcap 0: none */
    int64_t causal, window;     /* window 0: none */
    const int64_t *edges;       /* distance bin edges, bins + 1 of them */
    const int64_t *bin_of;      /* distance -> bin */
    int64_t bins;
    int64_t ldk;                /* floats from one row of the transposed keys to the next (posviz_key_stride) */
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

/* One vector register of floats (GCC and clang vector extensions): sixteen where the CPU has AVX-512, else eight
 * (one AVX register, two SSE or NEON ones). The blocks of the logits below are sized to fit the registers: with
 * sixteen-wide vectors on an AVX2 CPU (16 registers of eight floats) they would spill to the stack, about 7x slower. */
#ifndef POSVIZ_VL  /* the width may be given (-DPOSVIZ_VL=16: the tests run the AVX-512 layout on any CPU) */
#if defined(__AVX512F__)
#define POSVIZ_VL 16
#else
#define POSVIZ_VL 8
#endif
#endif
#define VL POSVIZ_VL
/* vectors of keys per row in the four-row logits: 16 accumulators of AVX-512's 32 registers, 8 of AVX2's 16 */
#define KV (VL >= 16 ? 4 : 2)
#define KB (KV * VL)  /* keys per block of the four-row logits */
typedef float vf __attribute__((vector_size(VL * 4)));
typedef int32_t vi __attribute__((vector_size(VL * 4)));

static inline vf loadv(const float *x) { vf v; memcpy(&v, x, sizeof v); return v; }
static inline void storev(float *x, vf v) { memcpy(x, &v, sizeof v); }
static inline vf vmax(vf a, vf b) {  /* lane by lane: one vmaxps (a compare and a blend waited on each other) */
    vf r;
    for (int u = 0; u < VL; u++) r[u] = a[u] > b[u] ? a[u] : b[u];
    return r;
}

/* exp(x) for x <= 0, one vector at a time, inline (libm's vector expf is a call per vector, and the sums that follow
 * cannot share its registers): x = n ln 2 + r with |r| <= ln 2 / 2 (ln 2 in two parts), exp(r) by its Taylor series
 * to r^7 (truncation below 6e-9 relative), times 2^n put into the exponent bits. Measured against exp in double at
 * every float in [-20, 0]: at most 1.2e-7 relative (two float roundings). Below -87 the result is 0 (it would be
 * subnormal: under 1e-37 of the row's largest weight, 1). */
static inline vf vexp(vf x) {
    vf nf;
    for (int u = 0; u < VL; u++) nf[u] = __builtin_rintf(x[u] * 1.44269504088896341f);
    const vf r = (x - nf * 0.693145751953125f) - nf * 1.428606765330187e-06f;
    vf y = (vf){0} + (1.0f / 5040.0f);
    y = y * r + (1.0f / 720.0f);
    y = y * r + (1.0f / 120.0f);
    y = y * r + (1.0f / 24.0f);
    y = y * r + (1.0f / 6.0f);
    y = y * r + 0.5f;
    y = y * r + 1.0f;
    y = y * r + 1.0f;
    const vi n = __builtin_convertvector(nf, vi);
    const vi keep = x > -87.0f;               /* all ones where the result is normal */
    return (vf)((((vi)y) + (n << 23)) & keep);
}

/* The largest of x[0 .. len) (len >= 1), in four vector accumulators (one would wait on each maximum in turn). */
static inline float largest(const float *restrict x, int64_t len) {
    float top = x[0];
    int64_t j = 0;
    if (len >= 4 * VL) {
        vf a[4] = {loadv(x), loadv(x + VL), loadv(x + 2 * VL), loadv(x + 3 * VL)};
        for (j = 4 * VL; j + 4 * VL <= len; j += 4 * VL)
            for (int u = 0; u < 4; u++) a[u] = vmax(a[u], loadv(x + j + VL * u));
        const vf b = vmax(vmax(a[0], a[1]), vmax(a[2], a[3]));
        for (int u = 0; u < VL; u++) top = b[u] > top ? b[u] : top;
    }
    for (; j < len; j++) top = x[j] > top ? x[j] : top;
    return top;
}

/* s[r * JC + t] = cap(q_r . k_(j0 + t)) for rows r < rows (at most 4, q already scaled) and keys j0 .. j0 + len;
 * kt is d x n (transposed keys, rows p->ldk floats apart). KB keys of four rows at a time in 4 x KV vector
 * accumulators: each vector of keys loaded once serves the four rows. */
static inline void logits(const Params *p, const float *restrict q, int64_t rows, const float *restrict kt, int64_t j0,
                          int64_t len, float *restrict s) {
    const int64_t n = p->ldk, d = p->d;
    int64_t j = 0;
    if (rows == 4) {
        for (; j + KB <= len; j += KB) {
            vf a[4][KV];  /* zeroed and stored one vector at a time: as an array initialised and copied whole,
                           * GCC zeroed it with a call of memset and copied it through the stack, each block */
            for (int r = 0; r < 4; r++)
                for (int v = 0; v < KV; v++) a[r][v] = (vf){0};
            const float *restrict k = kt + j0 + j;
            for (int64_t c = 0; c < d; c++, k += n) {
                vf kv[KV];
                for (int v = 0; v < KV; v++) kv[v] = loadv(k + v * VL);
                for (int r = 0; r < 4; r++) {
                    const float qc = q[r * d + c];
                    for (int v = 0; v < KV; v++) a[r][v] += qc * kv[v];
                }
            }
            for (int r = 0; r < 4; r++)
                for (int v = 0; v < KV; v++) storev(s + r * JC + j + v * VL, a[r][v]);
        }
    }
    for (int64_t r = 0; r < rows; r++) {
        const float *restrict qr = q + r * d;
        float *restrict sr = s + r * JC;
        int64_t t = j;
        for (; t + VL <= len; t += VL) {
            vf a = {0};
            const float *restrict k = kt + j0 + t;
            for (int64_t c = 0; c < d; c++, k += n) a += qr[c] * loadv(k);
            memcpy(sr + t, &a, sizeof a);
        }
        for (; t < len; t++) {
            float v = 0.0f;
            for (int64_t c = 0; c < d; c++) v += qr[c] * kt[c * n + j0 + t];
            sr[t] = v;
        }
        if (p->softcap > 0.0f) {
            const float cap = p->softcap, inv = 1.0f / p->softcap;
            for (t = 0; t < len; t++) sr[t] = cap * tanhf(sr[t] * inv);
        }
    }
}

/* The smallest distance D whose keys hold `target` of a query's mass, `before` of it in the bins ahead of bin m, the
 * first to reach the target (its mass taken as spread evenly over its distances), as kernel.py's _spans. */
static int64_t span_in(const Params *p, const double *bd, int64_t m, double before, double target) {
    double inside = bd[m] > 2.2250738585072014e-308 ? bd[m] : 2.2250738585072014e-308;
    double frac = (target - before) / inside;
    frac = frac < 0.0 ? 0.0 : (frac > 1.0 ? 1.0 : frac);
    int64_t lo = p->edges[m], width = p->edges[m + 1] - p->edges[m];
    int64_t step = (int64_t)ceil(frac * (double)width);
    int64_t span = lo + (step < 1 ? 1 : step) - 1;
    int64_t last = p->edges[p->bins] - 1;
    return span < 0 ? 0 : (span > last ? last : span);
}

/* The first bin at or after *b whose cumulative mass (*cum: the mass of the bins before *b) reaches `target`,
 * leaving *cum the mass before it; -1 (and *b past the last bin) where none does. Eight bins at a time while their
 * sum falls short (one dependent addition per eight bins: a query's 50 % and 90 % sat 80 of 84 bins out at n = 2048,
 * and a bin at a time was a tenth of the kernel's time there), then bin by bin. */
static int64_t reach(const double *bd, int64_t bins, double target, int64_t *b, double *cum) {
    while (*b + 8 <= bins) {
        const double *x = bd + *b;
        const double eight = ((x[0] + x[1]) + (x[2] + x[3])) + ((x[4] + x[5]) + (x[6] + x[7]));
        if (*cum + eight >= target) break;
        *cum += eight;
        *b += 8;
    }
    for (; *b < bins; (*b)++) {
        if (*cum + bd[*b] >= target) return *b;
        *cum += bd[*b];
    }
    return -1;
}

/* Count a query's spans of 50 % and 90 % of its mass (mass by bin `bd`) into span50 and span90. Where rounding
 * leaves a target unreached, the last bin is taken. */
static void add_spans(const Params *p, const double *bd, double mass, double *span50, double *span90) {
    const double t50 = mass * 0.5, t90 = mass * 0.9;
    const int64_t last = p->bins - 1;
    int64_t b = 0;
    double cum = 0.0;
    int64_t m50 = reach(bd, p->bins, t50, &b, &cum);
    double b50 = cum;
    if (m50 < 0) { m50 = last; b50 = cum - bd[last]; b = last; cum = b50; }
    int64_t m90 = reach(bd, p->bins, t90, &b, &cum);  /* from the 50 % bin on: it may hold both */
    double b90 = cum;
    if (m90 < 0) { m90 = last; b90 = cum - bd[last]; }
    span50[span_in(p, bd, m50, b50, t50)] += 1.0;
    span90[span_in(p, bd, m90, b90, t90)] += 1.0;
}

/* Add a[0 .. len) (keys j0 ..) of query i to its mass by distance bin; bins 0 .. exact - 1 hold one distance each. */
static inline void add_bins(const Params *p, int64_t exact, int64_t i, int64_t j0, int64_t len, const float *restrict a,
                            double *restrict bd) {
    int64_t j = j0, end = j0 + len;
    while (j < end) {
        int64_t dist = i >= j ? i - j : j - i;
        if (dist < exact) {  /* the keys within `exact` of the query, in two straight loops */
            const int64_t mid = i + 1 < end ? i + 1 : end, stop = i + exact < end ? i + exact : end;
            for (int64_t x = j; x < mid; x++) bd[i - x] += a[x - j0];
            for (int64_t x = mid > j ? mid : j; x < stop; x++) bd[x - i] += a[x - j0];
            j = stop;
            continue;
        }
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

/* The sums of one query's weights a[0 .. len) (keys j0 ..) in one sweep, run by run of its distance bins: each
 * weight into the attention received (rec, float, from key j0) and the diagonal sums (dg, from offset j0 - i), and
 * each run's mass (double) into its bin of bd (the bins below `exact`, one distance each, in straight loops), the
 * row's mass *tm and squares *ts (a sweep for the bins after one for the other sums read every weight again: a
 * sixth of the one pass's time at n = 8192). */
static inline void add_row(const Params *p, int64_t exact, int64_t i, int64_t j0, int64_t len, const float *restrict a,
                           float *restrict rec, double *restrict dg, double *restrict bd, double *tm, double *ts) {
    int64_t j = j0;
    const int64_t end = j0 + len;
    double mass = 0.0, sq = 0.0;
    while (j < end) {
        const int64_t dist = i >= j ? i - j : j - i;
        int64_t stop, b = -1;
        if (dist < exact) {  /* the keys within `exact` of the query: a bin each */
            const int64_t mid = i + 1 < end ? i + 1 : end;
            stop = i + exact < end ? i + exact : end;
            for (int64_t x = j; x < mid; x++) bd[i - x] += a[x - j0];
            for (int64_t x = mid > j ? mid : j; x < stop; x++) bd[x - i] += a[x - j0];
        } else {
            b = p->bin_of[dist];
            /* the first key past this bin's run: distances fall as j rises up to the query, then rise */
            stop = j <= i ? i - p->edges[b] + 1 : i + p->edges[b + 1];
            if (stop > end) stop = end;
            if (stop <= j) stop = j + 1;
        }
        const float *restrict x = a + (j - j0);
        float *restrict rx = rec + (j - j0);
        double *restrict dx = dg + (j - j0);
        double t = 0.0, t2 = 0.0;
        for (int64_t u = 0; u < stop - j; u++) {
            rx[u] += x[u];
            dx[u] += x[u];
            t += x[u];
            t2 += (double)x[u] * (double)x[u];
        }
        if (b >= 0) bd[b] += t;
        mass += t; sq += t2;
        j = stop;
    }
    *tm += mass; *ts += sq;
}

/* Add a[0 .. len) (keys j0 ..) to row `row` of the map: exact, or pooled into map x map cells, cell c holding the
 * keys first[c] .. first[c + 1] - 1 (the keys j with j * map / n == c). */
static inline void add_map(const Params *p, const int64_t *first, int64_t row, int64_t j0, int64_t len,
                           const float *restrict a, double *restrict map) {
    const int64_t m = p->map, n = p->n;
    double *restrict cells = map + row * m;
    if (m == n) {
        for (int64_t j = 0; j < len; j++) cells[j0 + j] += a[j];
        return;
    }
    int64_t c = j0 * m / n, j = j0;
    const int64_t end = j0 + len, w = n / m;
    if (n % m == 0 && (w == 2 || w == 4 || w == 8)) {
        /* cells of w keys each (n = 1024, 2048 and 4096 on the default map of 512): the whole cells in loops of a
         * fixed stride, which the compiler vectorises; the general loop below made the kernel 15 % slower at 2048 */
        for (; j < end && j % w; j++) cells[c] += a[j - j0];
        c = j / w;
        const float *restrict x = a + (j - j0);
        const int64_t whole = (end - j) / w;
        if (w == 2) {
            for (int64_t t = 0; t < whole; t++, x += 2) cells[c + t] += (double)x[0] + x[1];
        } else if (w == 4) {
            for (int64_t t = 0; t < whole; t++, x += 4) cells[c + t] += ((double)x[0] + x[1]) + ((double)x[2] + x[3]);
        } else {
            for (int64_t t = 0; t < whole; t++, x += 8)
                cells[c + t] += (((double)x[0] + x[1]) + ((double)x[2] + x[3]))
                                + (((double)x[4] + x[5]) + ((double)x[6] + x[7]));
        }
        j += whole * w; c += whole;
        for (; j < end; j++) cells[c] += a[j - j0];
        return;
    }
    while (j < end) {
        const int64_t stop = first[c + 1] < end ? first[c + 1] : end;
        double t = 0.0;
        for (int64_t x = j; x < stop; x++) t += a[x - j0];
        cells[c++] += t;
        j = stop;
    }
}

/* The keys *j0 .. *j1 of the chunk c0 .. c1 that query i sees (*j1 <= *j0: none). */
static inline void row_keys(const Params *p, int64_t i, int64_t c0, int64_t c1, int64_t *j0, int64_t *j1) {
    *j0 = lo_key(p, i) > c0 ? lo_key(p, i) : c0;
    *j1 = hi_key(p, i) < c1 ? hi_key(p, i) : c1;
}

/* The keys *gj0 .. *gj1 of the chunk c0 .. c1 that any of the queries i0 .. i0 + rows sees. */
static inline void group_keys(const Params *p, int64_t i0, int64_t rows, int64_t c0, int64_t c1, int64_t *gj0, int64_t *gj1) {
    *gj0 = c1; *gj1 = c0;
    for (int64_t i = i0; i < i0 + rows; i++) {
        int64_t j0, j1;
        row_keys(p, i, c0, c1, &j0, &j1);
        if (j1 > j0) { *gj0 = j0 < *gj0 ? j0 : *gj0; *gj1 = j1 > *gj1 ? j1 : *gj1; }
    }
}

/* The keys *lo .. *hi that any of the queries i0 .. i1 - 1 sees (whose map row is `row`, where row >= 0). */
static inline void tile_keys(const Params *p, int64_t i0, int64_t i1, int64_t row, int64_t *lo, int64_t *hi) {
    *lo = p->n; *hi = 0;
    for (int64_t i = i0; i < i1; i++) {
        if (row >= 0 && i * p->map / p->n != row) continue;
        if (lo_key(p, i) < *lo) *lo = lo_key(p, i);
        if (hi_key(p, i) > *hi) *hi = hi_key(p, i);
    }
}

/* The rows of one tile's logits in the order they are computed: per chunk of up to jc keys, per group of four queries
 * (their logits in one call of `logits`), per query of the group that sees keys of the chunk. The one traversal of
 * the logits, which both entries below run: `tile_rows` starts it, each `next_row` hands out one row's slice. */
typedef struct {
    const Params *p;
    const float *qs, *kt;       /* the tile's scaled queries, the transposed keys */
    float *s;                   /* the logits of the current group, JC floats a row */
    int64_t i0, rows, jlo, jhi, jc;
    int64_t c0, c1, g, grows, gj0, r;  /* the current chunk c0 .. c1, group g .. g + grows (keys from gj0), next row */
} TileRows;

static inline TileRows tile_rows(const Params *p, const float *qs, const float *kt, float *s, int64_t i0, int64_t rows,
                                 int64_t jlo, int64_t jhi, int64_t jc) {
    /* positioned past the last group of a chunk before jlo, so that the first next_row starts at chunk jlo */
    return (TileRows){p, qs, kt, s, i0, rows, jlo, jhi, jc, jlo - jc, jlo, rows, 0, 0, rows};
}

/* The next row: r (of the tile), ci (its chunk, from 0), its keys j0 .. j0 + len and their logits sr; 0 when the tile
 * is done. */
static inline int next_row(TileRows *t, int64_t *r, int64_t *ci, int64_t *j0, int64_t *len, const float **sr) {
    for (;;) {
        while (t->r >= t->g + t->grows) {  /* the group done: the next with keys in this chunk, or the next chunk */
            t->g += 4;
            if (t->g >= t->rows) {
                t->c0 += t->jc;
                if (t->c0 >= t->jhi) return 0;
                t->c1 = t->c0 + t->jc < t->jhi ? t->c0 + t->jc : t->jhi;
                t->g = 0;
            }
            t->grows = t->rows - t->g < 4 ? t->rows - t->g : 4;
            int64_t gj1;  /* the keys of this chunk that any row of the group sees */
            group_keys(t->p, t->i0 + t->g, t->grows, t->c0, t->c1, &t->gj0, &gj1);
            if (gj1 <= t->gj0) { t->r = t->g + t->grows; continue; }
            logits(t->p, t->qs + t->g * t->p->d, t->grows, t->kt, t->gj0, gj1 - t->gj0, t->s);
            t->r = t->g;
        }
        const int64_t row = t->r++;
        int64_t a, b;
        row_keys(t->p, t->i0 + row, t->c0, t->c1, &a, &b);
        if (b <= a) continue;
        *r = row; *ci = (t->c0 - t->jlo) / t->jc; *j0 = a; *len = b - a;
        *sr = t->s + (row - t->g) * JC + (a - t->gj0);
        return 1;
    }
}

/* first[c] for c = 0 .. map: the first key of cell c of a map row, ceil(c n / map) (add_map). */
static void map_cells(const Params *p, int64_t *first) {
    for (int64_t c = 0; c <= p->map; c++) first[c] = (c * p->n + p->map - 1) / p->map;
}

/* How many leading bins hold one distance each (bin d holds distance d; add_bins sums them in straight loops). */
static int64_t exact_bins(const Params *p) {
    int64_t exact = 0;
    while (exact < p->bins && p->edges[exact] == exact && p->edges[exact + 1] == exact + 1) exact++;
    return exact;
}

/* Keys per chunk: as many as keep a chunk of transposed keys (d x keys floats) within 32 KiB of the L1 cache, in
 * multiples of 64 (the four-row logits), 64 to JC. */
static int64_t chunk_keys(int64_t d) {
    int64_t keys = (8192 / (d > 0 ? d : 1)) / 64 * 64;
    return keys < 64 ? 64 : (keys > JC ? JC : keys);
}

/* The row stride (floats) of the transposed keys for n positions of head dimension d: n rounded up to 4 KiB, plus
 * one chunk of keys. Rows a multiple of 4 KiB apart fall into the same sets of the L1 cache, and a chunk's d rows
 * (16 at d = 16) would compete for its 12 ways, the chunk evicting itself; one chunk further apart, the rows of a
 * chunk spread over all its sets (4-6 % less time an entry at n = 8192, d = 16 and 64; benchmarks/README.md,
 * section 16). */
int64_t posviz_key_stride(int64_t n, int64_t d) {
    return (n + 1023) / 1024 * 1024 + chunk_keys(d);
}

/* One block of one head: q is n x d, kt is d x n (rows p->ldk floats apart); adds into `out`. Returns 0, or -1 when
 * memory ran out. */
int posviz_head_statistics(const Params *p, const float *q, const float *kt, Sums *out) {
    const int64_t n = p->n, d = p->d, bins = p->bins, jc = chunk_keys(d), chunks = (n + jc - 1) / jc, mside = p->map;
    float *s = malloc(sizeof(float) * 4 * JC), *e = malloc(sizeof(float) * (size_t)(TQ * n));
    float *shift = malloc(sizeof(float) * (size_t)(TQ * chunks));
    float *seg = malloc(sizeof(float) * (size_t)n);            /* attention received in one map row's queries */
    double *diag = malloc(sizeof(double) * (size_t)(n + TQ));
    float *qs = malloc(sizeof(float) * (size_t)(TQ * d));
    double *bd = malloc(sizeof(double) * (size_t)(TQ * bins));
    int64_t *first = malloc(sizeof(int64_t) * (size_t)(mside + 1));
    if (!s || !e || !shift || !seg || !diag || !qs || !bd || !first) {
        free(s); free(e); free(shift); free(seg); free(diag); free(qs); free(bd); free(first);
        return -1;
    }
    map_cells(p, first);
    const int64_t exact = exact_bins(p);
    double m[TQ], l[TQ], w[TQ], lse[TQ], mass[TQ], sq[TQ];
    int seen[TQ];
    for (int64_t i0 = 0; i0 < n; i0 += TQ) {
        const int64_t i1 = i0 + TQ < n ? i0 + TQ : n, rows = i1 - i0;
        int64_t jlo, jhi;
        tile_keys(p, i0, i1, -1, &jlo, &jhi);
        const int64_t width = jhi - jlo;
        for (int64_t r = 0; r < rows; r++) { seen[r] = 0; l[r] = w[r] = mass[r] = sq[r] = 0.0; }
        for (int64_t t = 0; t < rows * d; t++) qs[t] = q[i0 * d + t] * p->scale;
        memset(bd, 0, sizeof(double) * (size_t)(rows * bins));
        /* A: the logits, once */
        TileRows it = tile_rows(p, qs, kt, s, i0, rows, jlo, jhi, jc);
        int64_t r, ci, j0, len;
        const float *row_s;
        while (next_row(&it, &r, &ci, &j0, &len, &row_s)) {
            const int64_t i = i0 + r;
            const float *restrict sr = row_s;
            double *restrict row_bins = bd + r * bins;
            const float top = largest(sr, len);
            if (!seen[r]) {
                m[r] = top;
                seen[r] = 1;
            } else if (top > m[r]) {  /* a larger logit: rescale what was summed in the old shift */
                const double f = exp(m[r] - (double)top);
                w[r] = f * (w[r] + ((double)top - m[r]) * l[r]);  /* each (m - s) grows by top - m */
                l[r] *= f;
                for (int64_t b = 0; b < bins; b++) row_bins[b] *= f;
                m[r] = top;
            }
            const float at = (float)m[r];
            float *restrict ev = e + r * width + (j0 - jlo);
            float tl = 0.0f, tw = 0.0f;
            int64_t j = 0;
            vf vl = {0}, vw = {0};
            for (; j + VL <= len; j += VL) {
                const vf sv = loadv(sr + j), x = vexp(sv - at);
                memcpy(ev + j, &x, sizeof x);
                vl += x;
                vw += x * (at - sv);
            }
            for (int u = 0; u < VL; u++) { tl += vl[u]; tw += vw[u]; }
            for (; j < len; j++) {
                const float x = expf(sr[j] - at);
                ev[j] = x;
                tl += x;
                tw += x * (at - sr[j]);
            }
            l[r] += tl; w[r] += tw;
            shift[r * chunks + ci] = at;
            add_bins(p, exact, i, j0, len, ev, row_bins);
        }
        /* B: the weights into the sums over queries. Attention received is summed in float over the queries of one
         * row of the map (a segment), then added to the received sums and pooled into that map row (double). */
        const int64_t k0 = jlo - (i1 - 1);  /* the tile's lowest offset j - i */
        memset(diag, 0, sizeof(double) * (size_t)(width + rows));
        int64_t seg_row = -1, seg_lo = n, seg_hi = 0;
        for (int64_t r = 0; r <= rows; r++) {
            const int64_t i = i0 + r, row = r < rows ? i * mside / n : -2;
            if (row != seg_row) {  /* flush the segment */
                if (seg_row >= 0 && seg_hi > seg_lo) {
                    for (int64_t j = seg_lo; j < seg_hi; j++) out->received[j] += seg[j];
                    add_map(p, first, seg_row, seg_lo, seg_hi - seg_lo, seg + seg_lo, out->map);
                }
                if (r == rows) break;
                seg_row = row;
                seg_lo = n; seg_hi = 0;
            }
            lse[r] = m[r] + log(l[r]);
            const int64_t lo = lo_key(p, i), hi = hi_key(p, i);
            if (hi > lo) {  /* widen the segment, zeroing what it newly covers */
                if (seg_hi <= seg_lo) {
                    memset(seg + lo, 0, sizeof(float) * (size_t)(hi - lo));
                    seg_lo = lo; seg_hi = hi;
                }
                if (lo < seg_lo) { memset(seg + lo, 0, sizeof(float) * (size_t)(seg_lo - lo)); seg_lo = lo; }
                if (hi > seg_hi) { memset(seg + seg_hi, 0, sizeof(float) * (size_t)(hi - seg_hi)); seg_hi = hi; }
            }
            for (int64_t c0 = jlo; c0 < jhi; c0 += jc) {
                const int64_t c1 = c0 + jc < jhi ? c0 + jc : jhi, ci = (c0 - jlo) / jc;
                const int64_t j0 = lo > c0 ? lo : c0, j1 = hi < c1 ? hi : c1;
                if (j1 <= j0) continue;
                const int64_t len = j1 - j0;
                const float f = (float)exp((double)shift[r * chunks + ci] - lse[r]);
                const float *restrict ev = e + r * width + (j0 - jlo);
                float *restrict rec = seg + j0;
                double *restrict dg = diag + (j0 - i - k0);
                double tm = 0.0, ts = 0.0;
                for (int64_t j = 0; j < len; j++) {
                    const float a = ev[j] * f;
                    rec[j] += a;
                    dg[j] += a;
                    tm += a;
                    ts += (double)a * (double)a;
                }
                mass[r] += tm; sq[r] += ts;
                if (j0 == 0 && i >= 1) out->sink[0] += ev[0] * f;
            }
        }
        for (int64_t t = 0; t < width + rows - 1; t++) out->offsets[k0 + n - 1 + t] += diag[t];
        for (int64_t r = 0; r < rows; r++) {
            const int64_t i = i0 + r;
            /* the mass and squares of the weights as they went into the sums over queries (float rounding and all):
             * Toeplitz scores and the positional share difference them with the diagonal sums */
            const double g = exp(m[r] - lse[r]);  /* 1 / l: the largest weight */
            out->row_mass[i] += mass[r];
            out->row_sq[i] += sq[r];
            out->row_sum_sq[i] += mass[r] * mass[r];
            out->entropy[i] += log(l[r]) * mass[r] + w[r] * g;  /* sum_j a_j (lse - s_j), two terms >= 0 */
            out->max_weight[i] += g;
            if (i >= 1) {
                double *row_bins = bd + r * bins;
                for (int64_t b = 0; b < bins; b++) row_bins[b] *= g;
                add_spans(p, row_bins, mass[r], out->span50, out->span90);
            }
        }
    }
    free(s); free(e); free(shift); free(seg); free(diag); free(qs); free(bd); free(first);
    return 0;
}

/* One block of one head in one pass, its row normalisers given: lse[i] = log sum_j exp(s_ij), the log-sum-exp that
 * the model's own attention computed for query i (PyTorch's CPU flash kernel hands it out beside its output; see
 * normalisers.py). The weights a_ij = exp(s_ij - lse_i) then go straight into every sum, with no row maximum, no
 * rescaling and no tile of kept exponentials (the two passes above): 13-20 % less time an entry
 * (benchmarks/README.md, section 16); a tile with a row whose weights do not sum to 1 within REDO is summed again.
 * Attention received is summed in float over the queries of each map row of the tile (one segment of n floats each),
 * then added to the received sums and pooled into its map row (double). */
int posviz_head_statistics_lse(const Params *p, const float *q, const float *kt, const float *lse, Sums *out) {
    const int64_t n = p->n, d = p->d, bins = p->bins, jc = chunk_keys(d), mside = p->map;
    const int64_t segs_max = mside == n || (TQ * mside) / n + 2 > TQ ? TQ : (TQ * mside) / n + 2;
    float *s = malloc(sizeof(float) * 4 * JC), *a = malloc(sizeof(float) * JC);
    float *seg = malloc(sizeof(float) * (size_t)(segs_max * n));
    double *diag = malloc(sizeof(double) * (size_t)(n + TQ));
    float *qs = malloc(sizeof(float) * (size_t)(TQ * d));
    double *bd = malloc(sizeof(double) * (size_t)(TQ * bins));
    int64_t *first = malloc(sizeof(int64_t) * (size_t)(mside + 1));
    if (!s || !a || !seg || !diag || !qs || !bd || !first) {
        free(s); free(a); free(seg); free(diag); free(qs); free(bd); free(first);
        return -1;
    }
    map_cells(p, first);
    const int64_t exact = exact_bins(p);
    double mass[TQ], sq[TQ], w[TQ], sink;
    float top[TQ], at[TQ], corr[TQ];
    for (int64_t i0 = 0; i0 < n; i0 += TQ) {
        const int64_t i1 = i0 + TQ < n ? i0 + TQ : n, rows = i1 - i0;
        int64_t jlo, jhi;
        tile_keys(p, i0, i1, -1, &jlo, &jhi);
        const int64_t width = jhi - jlo, row0 = i0 * mside / n, segs = (i1 - 1) * mside / n - row0 + 1;
        const int64_t k0 = jlo - (i1 - 1);  /* the tile's lowest offset j - i */
        for (int64_t t = 0; t < rows * d; t++) qs[t] = q[i0 * d + t] * p->scale;
        for (int64_t r = 0; r < rows; r++) { at[r] = lse[i0 + r]; corr[r] = 1.0f; }
        /* The weights sum to 1 + delta, delta the rounding by which these logits differ from the model's (about the
         * float spacing of the largest logit: 5e-5 at logits near 500). Where some row of the tile is off by more
         * than REDO, the tile is summed again with that row's weights divided by their sum (corr): every sum of the
         * tile, the sums over queries too, then holds weights that sum to 1 within float rounding. */
        for (int attempt = 0;; attempt++) {
            for (int64_t g = 0; g < segs; g++) memset(seg + g * n + jlo, 0, sizeof(float) * (size_t)width);
            for (int64_t r = 0; r < rows; r++) { mass[r] = sq[r] = w[r] = 0.0; top[r] = -INFINITY; }
            memset(bd, 0, sizeof(double) * (size_t)(rows * bins));
            memset(diag, 0, sizeof(double) * (size_t)(width + rows));
            sink = 0.0;
            TileRows it = tile_rows(p, qs, kt, s, i0, rows, jlo, jhi, jc);
            int64_t r, ci, j0, len;
            const float *row_s;
            while (next_row(&it, &r, &ci, &j0, &len, &row_s)) {
                const int64_t i = i0 + r;
                const float *restrict sr = row_s;
                const float ar = at[r], cr = corr[r];
                /* the weights, the entropy's sum of a (lse - s) (terms >= 0) and the largest logit */
                float tw = 0.0f, tt = sr[0];
                int64_t j = 0;
                vf vw = {0}, vt = (vf){0} + sr[0];
                for (; j + VL <= len; j += VL) {
                    const vf sv = loadv(sr + j), x = vexp(sv - ar) * cr;
                    memcpy(a + j, &x, sizeof x);
                    vw += x * (ar - sv);
                    vt = vmax(vt, sv);
                }
                for (int u = 0; u < VL; u++) { tw += vw[u]; tt = vt[u] > tt ? vt[u] : tt; }
                for (; j < len; j++) {
                    const float x = expf(sr[j] - ar) * cr;
                    a[j] = x;
                    tw += x * (ar - sr[j]);
                    tt = sr[j] > tt ? sr[j] : tt;
                }
                w[r] += tw;
                top[r] = tt > top[r] ? tt : top[r];
                /* the sums over queries (received, diagonals) and the row's mass and squares, from the same
                 * float weights: Toeplitz scores and the positional share difference them */
                add_row(p, exact, i, j0, len, a, seg + (i * mside / n - row0) * n + j0, diag + (j0 - i - k0), bd + r * bins,
                        &mass[r], &sq[r]);
                if (j0 == 0 && i >= 1) sink += a[0];
            }
            int redo = 0;
            for (int64_t r = 0; r < rows; r++) redo |= fabs(mass[r] - 1.0) > REDO;
            if (!redo || attempt > 0) break;
            for (int64_t r = 0; r < rows; r++) corr[r] = (float)(1.0 / mass[r]);
        }
        out->sink[0] += sink;
        for (int64_t t = 0; t < width + rows - 1; t++) out->offsets[k0 + n - 1 + t] += diag[t];
        for (int64_t g = 0; g < segs; g++) {  /* each map row of the tile, over the keys its queries see */
            int64_t lo, hi;
            tile_keys(p, i0, i1, row0 + g, &lo, &hi);
            if (hi <= lo) continue;
            const float *sg = seg + g * n;
            for (int64_t j = lo; j < hi; j++) out->received[j] += sg[j];
            add_map(p, first, row0 + g, lo, hi - lo, sg + lo, out->map);
        }
        for (int64_t r = 0; r < rows; r++) {
            const int64_t i = i0 + r;
            out->row_mass[i] += mass[r];
            out->row_sq[i] += sq[r];
            out->row_sum_sq[i] += mass[r] * mass[r];
            /* the entropy and largest weight of the row a / mass (a = exp(s - at) corr): what the two passes give */
            const double inv = 1.0 / mass[r];
            out->entropy[i] += w[r] * inv + log(mass[r]) - log((double)corr[r]);
            out->max_weight[i] += exp((double)top[r] - (double)at[r]) * (double)corr[r] * inv;
            if (i >= 1) {
                add_spans(p, bd + r * bins, mass[r], out->span50, out->span90);
            }
        }
    }
    free(s); free(a); free(seg); free(diag); free(qs); free(bd); free(first);
    return 0;
}

/* Every head of a layer, its blocks in turn, on the threads of the process's OpenMP runtime (the one PyTorch runs its
 * own operations on, found by native.py): `parallel` is that runtime's GOMP_parallel, the entry GCC's
 * `#pragma omp parallel` compiles to (GNU libgomp has it, LLVM's and Intel's runtimes too), called with this file
 * compiled without OpenMP. Threads of our own lost the second core to PyTorch's: its workers spin for some
 * milliseconds after each of its parallel operations (the model's attention, just before), and a thread beside a
 * spinning one ran 40 % slower (benchmarks/README.md, section 16); the spinning workers take this work at once. */
#define SUM_COUNT 11
_Static_assert(sizeof(Sums) == SUM_COUNT * sizeof(double *), "Sums is SUM_COUNT pointers");

typedef struct {
    const Params *p;
    int64_t batch, heads, group;    /* group: query heads per key head */
    const float *q, *kt, *lse;      /* q (batch, heads, n, d); kt (batch, key heads, kt_stride floats); lse or NULL */
    int64_t kt_stride;
    Sums base;                      /* head 0 of each sum */
    int64_t stride[SUM_COUNT];      /* doubles from one head's sums to the next, in the order of Sums */
    int (*thread_num)(void), (*num_threads)(void);
    int code;                       /* 0, or -1: some head ran out of memory */
} Job;

/* Sum the heads of one share, the t-th of T consecutive ones (their keys shared), into the job. */
static void run_share(Job *job, int64_t t, int64_t T) {
    const int64_t n = job->p->n, d = job->p->d;
    for (int64_t h = job->heads * t / T; h < job->heads * (t + 1) / T; h++) {
        double *f[SUM_COUNT];
        memcpy(f, &job->base, sizeof f);
        for (int k = 0; k < SUM_COUNT; k++) f[k] += h * job->stride[k];
        Sums out;
        memcpy(&out, f, sizeof out);
        for (int64_t b = 0; b < job->batch; b++) {
            const float *q = job->q + (b * job->heads + h) * n * d;
            const float *kt = job->kt + (b * (job->heads / job->group) + h / job->group) * job->kt_stride;
            const int code = job->lse ? posviz_head_statistics_lse(job->p, q, kt, job->lse + (b * job->heads + h) * n, &out)
                                      : posviz_head_statistics(job->p, q, kt, &out);
            if (code) { __atomic_store_n(&job->code, code, __ATOMIC_RELAXED); return; }
        }
    }
}

static void omp_share(void *arg) {
    Job *job = arg;
    run_share(job, job->thread_num(), job->num_threads());
}

/* Run the job on `threads` threads of the runtime whose GOMP_parallel is `parallel`; 0, or -1 (out of memory). */
int posviz_heads_openmp(void (*parallel)(void (*)(void *), void *, unsigned, unsigned), Job *job, int64_t threads) {
    job->code = 0;
    parallel(omp_share, job, (unsigned)threads, 0);
    return job->code;
}

/* Share t of T of the job on the calling thread (where no OpenMP runtime was found: native.py's threads). */
int posviz_heads_share(Job *job, int64_t t, int64_t T) {
    run_share(job, t, T);
    return job->code;
}
