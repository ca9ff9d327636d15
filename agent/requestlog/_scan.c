/* The compiled block scanner of the request log's bulk path (agent/requestlog/scanner.py).

   lw_scan reads one block of kafka-request.log (whole lines, each ending in '\n'; a last line
   without one is read as complete) and writes, for every line, in one call:

     starts[k], ends[k]  the line's bytes are buf[starts[k]:ends[k]] (without its newline)
     kinds[k]            the request type: an index into the caller's API names, or n_names for a
                         follower Fetch (the name FETCH's own index is a consumer Fetch); -1 when
                         the line is not of the usual shape (Python's general path reads it then)
     secs[k], millis[k]  the stamp's second as the number yyyymmddHHMMSS, and its milliseconds
     stages[7k..7k+6]    the stage times in the order the line writes them (totalTimeMs first)
     conns[k]            the connection's 64-bit FNV-1a hash (its characters between the quotes)

   A line gets a kind only if it is certainly read the same way by LineParser.parse
   (agent/requestlog/parse.py): ASCII only, at most max_line bytes, the zone-less stamp
   "[yyyy-MM-dd HH:mm:ss,SSS] DEBUG Completed request:{", the first "requestApiKeyName":" of the
   JSON (ending within its first 4096 bytes) naming a known API, and the tail that starts at the
   last ,"connection": before the line's last '}' and ends at the first ,"securityProtocol":
   after it being exactly
     "connection":"<plain characters>","totalTimeMs":N,"requestQueueTimeMs":N,
     "localTimeMs":N,"remoteTimeMs":N,"throttleTimeMs":N,"responseQueueTimeMs":N,"sendTimeMs":N
   with every N a JSON number without sign or exponent below the value limit. N is converted to
   the double JSON parsers give (correctly rounded): exactly by one division when its digits fit
   in 15 (Clinger's fast path: both operands exact, one IEEE division is correctly rounded),
   else by strtod_l in the C locale on the token. A Fetch is a follower's as is_follower_fetch
   says, replayed on the same bytes.

   Never reads outside buf[0:len]; holds no state between calls; returns the number of lines,
   or -1 if they are more than cap (nothing else written is meaningful then), -2 before lw_init.

   lw_group then accounts a scanned block's lines at once (scanner.py's BlockScan.group): their
   stage rows grouped by kind, and the slow ones; lw_busy sums the time served per connection
   (scanner.py's BlockScan.busy); lw_unique counts one kind's rows per distinct value of each
   stage (scanner.py's count_rows, when a window folds them). */

#define _GNU_SOURCE
#include <locale.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NSTAGES 7

static const char PREFIX[] = "] DEBUG Completed request:{";
#define PREFIX_AT 24
#define BODY_AT 50 /* where the JSON starts: PREFIX_AT + the prefix but its '{' */
static const char NAME[] = "\"requestApiKeyName\":\"";
static const char CONN[] = ",\"connection\":";
static const char SEC[] = ",\"securityProtocol\":";
static const char REQUEST[] = "},\"request\":{";
static const char MAXWAIT[] = "\"maxWaitMs\"";
static const char REPLICA_ID[] = "\"replicaId\":";
static const char REPLICA_STATE[] = "\"replicaState\":";
/* The stage keys after the connection, in the broker's order (agent.requestlog.window.ROW_ORDER). */
static const char *const KEYS[NSTAGES] = {
    ",\"totalTimeMs\":",    ",\"requestQueueTimeMs\":", ",\"localTimeMs\":",    ",\"remoteTimeMs\":",
    ",\"throttleTimeMs\":", ",\"responseQueueTimeMs\":", ",\"sendTimeMs\":",
};
#define LEN(s) (sizeof(s) - 1)

static const double POW10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                               1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15};

static locale_t c_locale;

/* The first occurrence of needle lying wholly within [from, to), or NULL. */
static const char *find(const char *from, const char *to, const char *needle, size_t n) {
    if (to - from < (ptrdiff_t)n) return NULL;
    return memmem(from, (size_t)(to - from), needle, n);
}

/* The last occurrence of needle lying wholly within [from, to), or NULL. */
static const char *rfind(const char *from, const char *to, const char *needle, size_t n) {
    const char *p = to - n;
    while (p >= from) {
        p = memrchr(from, needle[0], (size_t)(p - from) + 1);
        if (p == NULL) return NULL;
        if (memcmp(p, needle, n) == 0) return p;
        p--;
    }
    return NULL;
}

static int is_ascii(const char *p, const char *end) {
    uint64_t acc = 0, w;
    for (; end - p >= 8; p += 8) {
        memcpy(&w, p, 8);
        acc |= w;
    }
    for (; p < end; p++) acc |= (unsigned char)*p;
    return (acc & 0x8080808080808080ULL) == 0;
}

static int digits(const char *p, int n, int *out) {
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return 0;
        v = v * 10 + (p[i] - '0');
    }
    *out = v;
    return 1;
}

/* The stamp "[yyyy-MM-dd HH:mm:ss,SSS]" at line[0:25] (the caller checked 25 bytes are there). */
static int stamp(const char *p, int64_t *sec, int64_t *ms) {
    int y, mo, d, h, mi, s, f;
    if (p[0] != '[' || p[5] != '-' || p[8] != '-' || p[11] != ' ' || p[14] != ':' || p[17] != ':') return 0;
    if (p[20] != ',' && p[20] != '.') return 0;
    if (!digits(p + 1, 4, &y) || !digits(p + 6, 2, &mo) || !digits(p + 9, 2, &d) || !digits(p + 12, 2, &h) ||
        !digits(p + 15, 2, &mi) || !digits(p + 18, 2, &s) || !digits(p + 21, 3, &f))
        return 0;
    *sec = ((((int64_t)y * 100 + mo) * 100 + d) * 100 + h) * 10000 + (int64_t)mi * 100 + s;
    *ms = f;
    return 1;
}

/* One JSON number without sign or exponent at [*at, end): its value in *out and *at past it. */
static int number(const char **at, const char *end, double limit, double *out) {
    const char *p = *at, *start = p;
    uint64_t mant = 0;
    int ndig = 0, frac = 0;
    if (p >= end || *p < '0' || *p > '9') return 0;
    if (*p == '0') {
        p++;
        ndig = 1;
    } else {
        for (; p < end && *p >= '0' && *p <= '9'; p++, ndig++)
            if (ndig < 19) mant = mant * 10 + (uint64_t)(*p - '0');
    }
    if (p < end && *p == '.') {
        p++;
        if (p >= end || *p < '0' || *p > '9') return 0;
        for (; p < end && *p >= '0' && *p <= '9'; p++, frac++, ndig++)
            if (ndig < 19) mant = mant * 10 + (uint64_t)(*p - '0');
    }
    double v;
    if (ndig <= 15) {
        v = (double)mant / POW10[frac]; /* both exact (< 2^53, 10^15): one correctly rounded division */
    } else {
        char tmp[64];
        size_t n = (size_t)(p - start);
        if (n >= sizeof tmp) return 0; /* a usual stage time is short; a long one takes the general path */
        memcpy(tmp, start, n);
        tmp[n] = '\0';
        v = strtod_l(tmp, NULL, c_locale);
    }
    if (!(v < limit)) return 0;
    *out = v;
    *at = p;
    return 1;
}

static int conn_char(char ch) {
    return (ch >= '0' && ch <= '9') || (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || ch == '.' ||
           ch == ':' || ch == '-' || ch == '_' || ch == '[' || ch == ']' || ch == '%' || ch == '/';
}

/* The tail [c + 1, s): "connection":"…",<the seven stage keys and numbers>, nothing else; the
   connection's characters hashed (FNV-1a, 64 bits) into *conn. */
static int tail(const char *c, const char *s, double limit, double *out, uint64_t *conn) {
    const char *p = c + 1;
    static const char OPEN[] = "\"connection\":\"";
    if (s - p < (ptrdiff_t)LEN(OPEN) || memcmp(p, OPEN, LEN(OPEN)) != 0) return 0;
    p += LEN(OPEN);
    uint64_t h = 0xcbf29ce484222325ULL;
    while (p < s && conn_char(*p)) {
        h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
        p++;
    }
    *conn = h;
    if (p >= s || *p != '"') return 0;
    p++;
    for (int k = 0; k < NSTAGES; k++) {
        size_t n = strlen(KEYS[k]);
        if (s - p < (ptrdiff_t)n || memcmp(p, KEYS[k], n) != 0) return 0;
        p += n;
        if (!number(&p, s, limit, out + k)) return 0;
    }
    return p == s;
}

/* is_follower_fetch (parse.py) over the JSON body [b, e). */
static int follower_fetch(const char *b, const char *e) {
    const char *r = find(b, e, REQUEST, LEN(REQUEST));
    if (r == NULL) return 0;
    const char *lim = (e - r > 2048) ? r + 2048 : e;
    const char *w = find(r, lim, MAXWAIT, LEN(MAXWAIT));
    ptrdiff_t stop = w ? w - b : (r - b) + 2048; /* as an index into the body, maybe past its end */
    const char *stop_p = (stop < e - b) ? b + stop : e;
    if (find(r, stop_p, REPLICA_STATE, LEN(REPLICA_STATE)) != NULL) return 1;
    const char *i = find(r, stop_p, REPLICA_ID, LEN(REPLICA_ID));
    if (i == NULL) return 0;
    ptrdiff_t at = (i - b) + (ptrdiff_t)LEN(REPLICA_ID);
    return at >= stop || at >= e - b || b[at] != '-';
}

/* The index of the API name [p, q) among names (each ended by '\0'), or -1. */
static long api_index(const char *p, const char *q, const char *names, long n_names) {
    size_t n = (size_t)(q - p);
    const char *name = names;
    for (long k = 0; k < n_names; k++) {
        size_t m = strlen(name);
        if (m == n && name[0] == p[0] && memcmp(name, p, n) == 0) return k;
        name += m + 1;
    }
    return -1;
}

/* One line [p, nl): its kind (-1 if not of the usual shape), stamp and stage times. */
static int32_t line(const char *p, const char *nl, long max_line, const char *names, long n_names,
                    long fetch_index, double limit, int64_t *sec, int64_t *ms, double *out, uint64_t *conn) {
    if (nl - p > max_line || nl - p < BODY_AT + 2 || !is_ascii(p, nl)) return -1;
    if (!stamp(p, sec, ms) || memcmp(p + PREFIX_AT, PREFIX, LEN(PREFIX)) != 0) return -1;
    const char *b = p + BODY_AT;
    const char *end = memrchr(b, '}', (size_t)(nl - b));
    if (end == NULL || end == b) return -1;
    const char *e = end + 1; /* the body is [b, e) */
    const char *name_lim = (e - b > 4096) ? b + 4096 : e;
    const char *i = find(b, name_lim, NAME, LEN(NAME));
    if (i == NULL) return -1;
    i += LEN(NAME);
    const char *q = memchr(i, '"', (size_t)(e - i));
    if (q == NULL || q == i) return -1;
    long api = api_index(i, q, names, n_names);
    if (api < 0) return -1;
    const char *c = rfind(b, e, CONN, LEN(CONN));
    if (c == NULL) return -1;
    const char *s = find(c, e, SEC, LEN(SEC));
    if (s == NULL || !tail(c, s, limit, out, conn)) return -1;
    if (api == fetch_index && follower_fetch(b, e)) return (int32_t)n_names;
    return (int32_t)api;
}

/* Once, before any lw_scan (the loader calls it): lw_scan itself keeps no state, so calls from
   several threads at once (ctypes releases the GIL) are safe. 0 if the C locale is not there. */
int lw_init(void) {
    if (c_locale == (locale_t)0) c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    return c_locale != (locale_t)0;
}

long lw_scan(const char *buf, long len, long max_line, const char *names, long n_names, long fetch_index,
             double limit, long cap, int64_t *starts, int64_t *ends, int32_t *kinds, int64_t *secs,
             int64_t *millis, double *stages, uint64_t *conns) {
    if (c_locale == (locale_t)0) return -2; /* lw_init not called, or it failed */
    const char *p = buf, *stop = buf + len;
    long k = 0;
    while (p < stop) {
        if (k >= cap) return -1;
        const char *nl = memchr(p, '\n', (size_t)(stop - p));
        if (nl == NULL) nl = stop;
        starts[k] = p - buf;
        ends[k] = nl - buf;
        secs[k] = 0;
        millis[k] = 0;
        conns[k] = 0;
        kinds[k] = line(p, nl, max_line, names, n_names, fetch_index, limit, secs + k, millis + k,
                        stages + (size_t)k * NSTAGES, conns + k);
        k++;
        p = nl + 1;
    }
    return k;
}

#define MAX_KINDS 256 /* request types: Kafka has ~90 APIs */

/* After lw_scan, for its n lines (every kind in [0, n_kinds)):

     counts[j]          the number of lines of kind j (n_kinds entries)
     grouped[7n]        the stage rows (7 doubles each) ordered by kind, each kind's rows in line
                        order: kind j's rows start at row counts[0] + ... + counts[j - 1]
     slow[m], slowness[m]  the indexes, in line order, of the lines whose slowness is at least
                        threshold, and that slowness: the total time, less the remote time for a
                        Fetch (kind fetch_a or fetch_b: a fetch waits in purgatory by design)
     lo[0], hi[0]       the index of a line with the least (secs, millis), and of one with the most

   Returns the number of slow lines, or -1 (nothing meaningful written) if a line's kind is not
   in [0, n_kinds) or n_kinds > MAX_KINDS. Holds no state; writes only within the sizes given. */
long lw_group(const int32_t *kinds, const int64_t *secs, const int64_t *millis, const double *stages, long n,
              long n_kinds, long fetch_a, long fetch_b, double threshold, int64_t *counts, double *grouped,
              int64_t *slow, double *slowness, int64_t *lo, int64_t *hi) {
    int64_t at[MAX_KINDS];
    if (n_kinds > MAX_KINDS || n_kinds < 1) return -1;
    for (long j = 0; j < n_kinds; j++) counts[j] = 0;
    long m = 0, least = 0, most = 0;
    for (long k = 0; k < n; k++) {
        int32_t kind = kinds[k];
        if (kind < 0 || kind >= n_kinds) return -1;
        counts[kind]++;
        const double *row = stages + (size_t)k * NSTAGES;
        double s = (kind == fetch_a || kind == fetch_b) ? row[0] - row[3] : row[0];
        if (s >= threshold) {
            slow[m] = k;
            slowness[m] = s;
            m++;
        }
        if (secs[k] < secs[least] || (secs[k] == secs[least] && millis[k] < millis[least])) least = k;
        if (secs[k] > secs[most] || (secs[k] == secs[most] && millis[k] > millis[most])) most = k;
    }
    int64_t off = 0;
    for (long j = 0; j < n_kinds; j++) {
        at[j] = off;
        off += counts[j];
    }
    for (long k = 0; k < n; k++)
        memcpy(grouped + (size_t)(at[kinds[k]]++) * NSTAGES, stages + (size_t)k * NSTAGES, NSTAGES * sizeof(double));
    *lo = least;
    *hi = most;
    return m;
}

/* After lw_scan, for its n lines (each of a kind >= 0): per distinct (kind, connection hash), in the
   order first seen, its kind at out_kind[i], the first line naming it at out_first[i], and the
   time the broker spent serving those lines at out_busy_us[i]: the sum of each line's total time
   (stages[7k], ms; less its remote time for kind fetch_a or fetch_b: a fetch waits in purgatory
   by design) times 1000, truncated to whole microseconds, so that the sum is exact and the same
   in any order and grouping (the Python paths truncate the same products). Counted in an
   open-addressing table: keys and slots have room for cap entries, cap a power of two >= 2n.
   Returns the number of distinct pairs. */
long lw_busy(const int32_t *kinds, const uint64_t *conns, const double *stages, long n, long fetch_a,
             long fetch_b, int32_t *out_kind, int64_t *out_first, int64_t *out_busy_us, uint64_t *keys,
             int64_t *slots, long cap) {
    int shift = 64;
    while (shift > 1 && (1L << (64 - shift)) < cap) shift--;
    const uint64_t mask = (uint64_t)cap - 1;
    long d = 0;
    for (long h = 0; h < cap; h++) slots[h] = -1;
    for (long k = 0; k < n; k++) {
        uint64_t key = conns[k];
        int32_t kind = kinds[k];
        uint64_t h = ((key ^ (uint64_t)(uint32_t)kind) * 0x9E3779B97F4A7C15ULL) >> shift;
        const double *row = stages + (size_t)k * NSTAGES;
        double served = (kind == fetch_a || kind == fetch_b) ? row[0] - row[3] : row[0];
        int64_t us = (int64_t)(served * 1000.0);
        for (;;) {
            int64_t at = slots[h];
            if (at < 0) {
                slots[h] = d;
                keys[h] = key;
                out_kind[d] = kind;
                out_first[d] = k;
                out_busy_us[d] = us;
                d++;
                break;
            }
            if (keys[h] == key && out_kind[at] == kind) {
                out_busy_us[at] += us;
                break;
            }
            h = (h + 1) & mask;
        }
    }
    return d;
}

/* For n rows (7 doubles each, e.g. one request type's rows of lw_group's grouped): per stage j,
   its distinct values at values[j * n] (in the order first seen), how many rows had each at
   counts[j * n], and their number in distinct[j]. Counted in an open-addressing table keyed by
   the value's bits: keys and slots have room for cap entries, cap a power of two >= 2n. The
   values are lw_scan's (finite, not negative: no -0.0, no NaN), so equal values have equal bits. */
void lw_unique(const double *rows, long n, double *values, int64_t *counts, int64_t *distinct, uint64_t *keys,
               int64_t *slots, long cap) {
    int shift = 64;
    while (shift > 1 && (1L << (64 - shift)) < cap) shift--;
    const uint64_t mask = (uint64_t)cap - 1;
    for (int j = 0; j < NSTAGES; j++) {
        double *v = values + (size_t)j * n;
        int64_t *c = counts + (size_t)j * n;
        long d = 0;
        for (long h = 0; h < cap; h++) slots[h] = -1;
        for (long k = 0; k < n; k++) {
            double x = rows[(size_t)k * NSTAGES + j];
            uint64_t bits;
            memcpy(&bits, &x, sizeof bits);
            uint64_t h = (bits * 0x9E3779B97F4A7C15ULL) >> shift;
            for (;;) {
                int64_t at = slots[h];
                if (at < 0) {
                    slots[h] = d;
                    keys[h] = bits;
                    v[d] = x;
                    c[d] = 1;
                    d++;
                    break;
                }
                if (keys[h] == bits) {
                    c[at]++;
                    break;
                }
                h = (h + 1) & mask;
            }
        }
        distinct[j] = d;
    }
}
