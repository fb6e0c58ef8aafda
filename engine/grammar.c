/* grammar.c - GBNF parsing, JSON Schema -> GBNF, the pushdown matcher and
 * token masks.
 *
 * Compiled form: a flat array of elements. Each rule has alternatives, each a
 * run of elements ended by EL_END; an element is a byte class (EL_CLASS, an
 * index into the class table) or a rule reference (EL_RULE). Groups and
 * repetitions were turned into helper rules by the parser.
 *
 * Matcher: a state is a SET of stacks. A stack is an array of element
 * positions; the last entry is the position to match next (always an
 * EL_CLASS: rule references are expanded into one stack per alternative,
 * finished alternatives popped, eagerly), the others are where to resume
 * after the rule below them returns. An empty stack means root is complete.
 * A call whose return position is the end of its alternative pushes nothing
 * (tail call), so right-recursive repetitions do not deepen the stack.
 * Sets are serialized into int32 arrays: [n_stacks, (len, pos...)*], with
 * duplicates removed and in a deterministic order, so two sets are equal
 * exactly when their arrays are. A walker holds an arena of such sets: a step
 * over one byte appends the next set, and going back is truncating.
 *
 * Token masks walk the vocabulary's byte trie depth-first, stepping the set
 * once per trie edge. For every distinct set on the path the fate of each of
 * the 256 bytes is computed once (rejected / leads back to the same set /
 * leads elsewhere); a trie subtree whose bytes all lead back to the same set
 * (the inside of a JSON string) is accepted whole without being walked.
 */
#include "engine/grammar.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { EL_END = 0, EL_RULE = 1, EL_CLASS = 2 };
#define EL_MAKE(t, v) ((int32_t)(((uint32_t)(v) << 2) | (uint32_t)(t)))
#define EL_TYPE(e) ((e) & 3)
#define EL_VAL(e) ((int32_t)((uint32_t)(e) >> 2))

#define MAX_DEPTH 1024     /* stack entries; deeper nesting is rejected */
#define MAX_REPEAT 100000  /* the largest m or n in {m,n} */

typedef struct {
    uint64_t w[4];
} bset;

static inline int bset_has(const bset *s, unsigned c) { return (int)((s->w[c >> 6] >> (c & 63)) & 1); }
static inline void bset_add(bset *s, unsigned c) { s->w[c >> 6] |= 1ull << (c & 63); }
static inline void bset_or(bset *d, const bset *s) {
    for (int i = 0; i < 4; i++) d->w[i] |= s->w[i];
}
static inline int bset_subset(const bset *a, const bset *b) {
    for (int i = 0; i < 4; i++)
        if (a->w[i] & ~b->w[i]) return 0;
    return 1;
}
static inline int bset_count(const bset *s) {
    int n = 0;
    for (int i = 0; i < 4; i++) n += __builtin_popcountll(s->w[i]);
    return n;
}

struct grammar {
    int32_t *el;      /* all alternatives of all rules */
    int32_t *alt;     /* start positions of alternatives; rule r has alt[alt_off[r]..alt_off[r+1]) */
    int32_t *alt_off; /* n_rules + 1 */
    bset *cls;
    int n_rules, root;
};

/* ------------------------------------------------------------------ */
/* growable int32 vector                                               */

typedef struct {
    int32_t *v;
    size_t n, cap;
    int borrowed; /* v is a caller's buffer: copied, not reallocated, when it grows */
} ivec;

/* Returns 0, or -1 when out of memory. */
static int ivec_reserve(ivec *a, size_t extra) {
    if (a->n + extra <= a->cap) return 0;
    size_t cap = a->cap ? a->cap : 64;
    while (cap < a->n + extra) cap *= 2;
    int32_t *v = a->borrowed ? malloc(cap * sizeof *v) : realloc(a->v, cap * sizeof *v);
    if (!v) return -1;
    if (a->borrowed && a->n) memcpy(v, a->v, a->n * sizeof *v);
    a->borrowed = 0;
    a->v = v;
    a->cap = cap;
    return 0;
}

static int ivec_push(ivec *a, int32_t x) {
    if (ivec_reserve(a, 1)) return -1;
    a->v[a->n++] = x;
    return 0;
}

/* ------------------------------------------------------------------ */
/* GBNF parser                                                         */

typedef struct {
    char *name;
    int line;    /* where it was first named */
    int defined; /* 1 once `name ::=` was seen (anonymous rules are born defined) */
    ivec body;   /* alternatives, each ended by EL_END */
} prule;

typedef struct {
    const char *src, *p;
    prule **rules;
    int n_rules, cap_rules;
    bset *cls;
    int n_cls, cap_cls;
    char *err;
    size_t errlen;
    int failed;
} gparser;

static int line_of(const char *src, const char *p) {
    int line = 1;
    for (const char *q = src; q < p; q++) line += *q == '\n';
    return line;
}

/* Records the first error (at line LINE, or without a line when 0). Returns -1. */
static int perr(gparser *ps, int line, const char *fmt, ...) {
    if (ps->failed) return -1;
    ps->failed = 1;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ps->err && ps->errlen) {
        if (line)
            snprintf(ps->err, ps->errlen, "line %d: %s", line, msg);
        else
            snprintf(ps->err, ps->errlen, "%s", msg);
    }
    return -1;
}

static int oom(gparser *ps) { return perr(ps, 0, "out of memory"); }

static void skip_space(gparser *ps) {
    for (;;) {
        while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r') ps->p++;
        if (*ps->p != '#') return;
        while (*ps->p && *ps->p != '\n') ps->p++;
    }
}

static int is_name_char(char c) { return isalnum((unsigned char)c) || c == '-' || c == '_'; }

/* Returns the index of the rule named NAME (LEN bytes), adding it when new, or -1 (OOM). */
static int rule_find(gparser *ps, const char *name, size_t len, int line) {
    for (int i = 0; i < ps->n_rules; i++)
        if (strlen(ps->rules[i]->name) == len && !memcmp(ps->rules[i]->name, name, len)) return i;
    if (ps->n_rules == ps->cap_rules) {
        int cap = ps->cap_rules ? 2 * ps->cap_rules : 32;
        prule **r = realloc(ps->rules, (size_t)cap * sizeof *r);
        if (!r) return oom(ps);
        ps->rules = r;
        ps->cap_rules = cap;
    }
    prule *r = calloc(1, sizeof *r);
    if (!r || !(r->name = malloc(len + 1))) {
        free(r);
        return oom(ps);
    }
    memcpy(r->name, name, len);
    r->name[len] = 0;
    r->line = line;
    ps->rules[ps->n_rules] = r;
    return ps->n_rules++;
}

/* A new anonymous rule named after rule PARENT. Returns its index or -1. */
static int rule_anon(gparser *ps, int parent, int line) {
    char name[160];
    snprintf(name, sizeof name, "%.100s#%d", ps->rules[parent]->name, ps->n_rules);
    int r = rule_find(ps, name, strlen(name), line);
    if (r >= 0) ps->rules[r]->defined = 1;
    return r;
}

/* Returns the element of the class C (added to the table when new), or -1. */
static int32_t class_el(gparser *ps, const bset *c) {
    for (int i = 0; i < ps->n_cls; i++)
        if (!memcmp(&ps->cls[i], c, sizeof *c)) return EL_MAKE(EL_CLASS, i);
    if (ps->n_cls == ps->cap_cls) {
        int cap = ps->cap_cls ? 2 * ps->cap_cls : 64;
        bset *n = realloc(ps->cls, (size_t)cap * sizeof *n);
        if (!n) return oom(ps);
        ps->cls = n;
        ps->cap_cls = cap;
    }
    ps->cls[ps->n_cls] = *c;
    return EL_MAKE(EL_CLASS, ps->n_cls++);
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Reads one byte of a literal or class at ps->p (an escape or a plain byte).
 * Returns the byte, or -1 after recording an error. */
static int read_byte(gparser *ps) {
    const char *p = ps->p;
    if (!*p || *p == '\n') return perr(ps, line_of(ps->src, p), "unterminated literal or class");
    if (*p != '\\') {
        ps->p++;
        return (unsigned char)*p;
    }
    p++;
    ps->p = p + 1;
    switch (*p) {
    case 'n': return '\n';
    case 't': return '\t';
    case 'r': return '\r';
    case '0': return 0;
    case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': case '.':
        return (unsigned char)*p;
    case 'x': {
        int h = hexval(p[1]), l = h >= 0 ? hexval(p[2]) : -1;
        if (l < 0) return perr(ps, line_of(ps->src, p), "bad \\x escape");
        ps->p = p + 3;
        return h * 16 + l;
    }
    default:
        return perr(ps, line_of(ps->src, p), "unknown escape '\\%c'", *p ? *p : '0');
    }
}

/* Parses [..] or [^..] at ps->p into C. Returns 0 or -1. */
static int parse_class(gparser *ps, bset *c) {
    int neg = 0;
    memset(c, 0, sizeof *c);
    ps->p++;
    if (*ps->p == '^') {
        neg = 1;
        ps->p++;
    }
    while (*ps->p != ']') {
        int lo = read_byte(ps), hi = lo;
        if (lo < 0) return -1;
        if (ps->p[0] == '-' && ps->p[1] != ']') {
            ps->p++;
            if ((hi = read_byte(ps)) < 0) return -1;
            if (hi < lo) return perr(ps, line_of(ps->src, ps->p), "empty range in class");
        }
        for (int b = lo; b <= hi; b++) bset_add(c, (unsigned)b);
    }
    ps->p++;
    if (neg)
        for (int i = 0; i < 4; i++) c->w[i] = ~c->w[i];
    return 0;
}

/* Parses an unsigned decimal at ps->p. Returns it, or -1 when absent. */
static long parse_count(gparser *ps) {
    if (!isdigit((unsigned char)*ps->p)) return -1;
    long n = 0;
    while (isdigit((unsigned char)*ps->p)) {
        if (n <= MAX_REPEAT) n = n * 10 + (*ps->p - '0');
        ps->p++;
    }
    return n;
}

/* Applies {MIN,MAX} (MAX -1: unbounded) to the item that starts at element
 * FROM of rule R's body (the body's tail). Returns 0 or -1. */
static int apply_repeat(gparser *ps, int r, size_t from, long min, long max, int line) {
    ivec *b = &ps->rules[r]->body;
    if (min > MAX_REPEAT || max > MAX_REPEAT) return perr(ps, line, "repetition count above %d", MAX_REPEAT);
    if (max >= 0 && max < min) return perr(ps, line, "repetition {%ld,%ld} has max < min", min, max);
    if (b->n == from) return 0; /* an empty item repeated is still empty */
    int32_t x;
    if (b->n - from == 1) {
        x = b->v[from];
    } else { /* a multi-element item (a literal) becomes a rule */
        int a = rule_anon(ps, r, line);
        if (a < 0) return -1;
        ivec *ab = &ps->rules[a]->body;
        b = &ps->rules[r]->body;
        if (ivec_reserve(ab, b->n - from + 1)) return oom(ps);
        memcpy(ab->v, b->v + from, (b->n - from) * sizeof *ab->v);
        ab->n = b->n - from;
        ab->v[ab->n++] = EL_MAKE(EL_END, 0);
        x = EL_MAKE(EL_RULE, a);
    }
    b->n = from;
    for (long i = 0; i < min; i++)
        if (ivec_push(b, x)) return oom(ps);
    if (max == min) return 0;
    /* tail ::= x tail | ε (unbounded), or a chain of max-min optional copies */
    int prev = -1;
    for (long i = 0; i < (max < 0 ? 1 : max - min); i++) {
        int t = rule_anon(ps, r, line);
        if (t < 0) return -1;
        ivec *tb = &ps->rules[t]->body;
        int32_t next = max < 0 ? EL_MAKE(EL_RULE, t) : prev >= 0 ? EL_MAKE(EL_RULE, prev) : -1;
        if (ivec_push(tb, x) || (next >= 0 && ivec_push(tb, next)) || ivec_push(tb, EL_MAKE(EL_END, 0)) ||
            ivec_push(tb, EL_MAKE(EL_END, 0)))
            return oom(ps);
        prev = t;
    }
    if (ivec_push(&ps->rules[r]->body, EL_MAKE(EL_RULE, prev))) return oom(ps);
    return 0;
}

/* Parses a postfix operator after the item at FROM of rule R, if any. Returns 0 or -1. */
static int parse_postfix(gparser *ps, int r, size_t from) {
    int line = line_of(ps->src, ps->p);
    char c = *ps->p;
    if (c == '*' || c == '+' || c == '?') {
        ps->p++;
        return apply_repeat(ps, r, from, c == '+', c == '?' ? 1 : -1, line);
    }
    if (c != '{') return 0;
    ps->p++;
    skip_space(ps);
    long min = parse_count(ps), max;
    if (min < 0) return perr(ps, line, "expected a count after '{'");
    skip_space(ps);
    max = min;
    if (*ps->p == ',') {
        ps->p++;
        skip_space(ps);
        max = parse_count(ps);
        skip_space(ps);
    }
    if (*ps->p != '}') return perr(ps, line, "expected '}' after a repetition count");
    ps->p++;
    return apply_repeat(ps, r, from, min, max, line);
}

/* 1 when a name followed by `::=` starts at P (the next rule begins). */
static int at_rule_start(const char *p) {
    if (!is_name_char(*p)) return 0;
    while (is_name_char(*p)) p++;
    while (*p == ' ' || *p == '\t') p++;
    return !strncmp(p, "::=", 3);
}

static int parse_alternatives(gparser *ps, int r, int nested);

/* Parses one item (literal, class, '.', group or rule name) with its postfix
 * into rule R's body. Returns 1 when an item was read, 0 at the end of the
 * sequence, -1 on error. */
static int parse_item(gparser *ps, int r) {
    skip_space(ps);
    const char *p = ps->p;
    int line = line_of(ps->src, p);
    size_t from = ps->rules[r]->body.n;
    bset c;
    if (*p == '"') {
        ps->p++;
        while (*ps->p != '"') {
            int b = read_byte(ps);
            if (b < 0) return -1;
            memset(&c, 0, sizeof c);
            bset_add(&c, (unsigned)b);
            int32_t e = class_el(ps, &c);
            if (e < 0 || ivec_push(&ps->rules[r]->body, e)) return e < 0 ? -1 : oom(ps);
        }
        ps->p++;
    } else if (*p == '[' || *p == '.') {
        if (*p == '[') {
            if (parse_class(ps, &c)) return -1;
        } else {
            memset(&c, 0xff, sizeof c);
            ps->p++;
        }
        int32_t e = class_el(ps, &c);
        if (e < 0 || ivec_push(&ps->rules[r]->body, e)) return e < 0 ? -1 : oom(ps);
    } else if (*p == '(') {
        ps->p++;
        int a = rule_anon(ps, r, line);
        if (a < 0 || parse_alternatives(ps, a, 1)) return -1;
        if (*ps->p != ')') return perr(ps, line, "unclosed '('");
        ps->p++;
        if (ivec_push(&ps->rules[r]->body, EL_MAKE(EL_RULE, a))) return oom(ps);
    } else if (is_name_char(*p) && !at_rule_start(p)) {
        while (is_name_char(*ps->p)) ps->p++;
        int ref = rule_find(ps, p, (size_t)(ps->p - p), line);
        if (ref < 0 || ivec_push(&ps->rules[r]->body, EL_MAKE(EL_RULE, ref))) return ref < 0 ? -1 : oom(ps);
    } else if (!*p || *p == '|' || *p == ')' || is_name_char(*p)) {
        return 0;
    } else {
        return perr(ps, line, "unexpected '%c'", *p);
    }
    skip_space(ps);
    return parse_postfix(ps, r, from) ? -1 : 1;
}

/* Parses alternatives into rule R's body, up to ')' when NESTED, else up to
 * the next rule or the end. Returns 0 or -1. */
static int parse_alternatives(gparser *ps, int r, int nested) {
    for (;;) {
        int got;
        while ((got = parse_item(ps, r)) == 1) {}
        if (got < 0) return -1;
        if (ivec_push(&ps->rules[r]->body, EL_MAKE(EL_END, 0))) return oom(ps);
        if (*ps->p == '|') {
            ps->p++;
            continue;
        }
        if (nested && *ps->p != ')') return perr(ps, line_of(ps->src, ps->p), "expected ')'");
        if (!nested && *ps->p == ')') return perr(ps, line_of(ps->src, ps->p), "unexpected ')'");
        return 0;
    }
}

static int parse_rules(gparser *ps) {
    for (;;) {
        skip_space(ps);
        if (!*ps->p) return 0;
        const char *name = ps->p;
        int line = line_of(ps->src, name);
        while (is_name_char(*ps->p)) ps->p++;
        if (ps->p == name) return perr(ps, line, "expected a rule name");
        size_t len = (size_t)(ps->p - name);
        while (*ps->p == ' ' || *ps->p == '\t') ps->p++;
        if (strncmp(ps->p, "::=", 3)) return perr(ps, line, "expected '::='");
        ps->p += 3;
        int r = rule_find(ps, name, len, line);
        if (r < 0) return -1;
        if (ps->rules[r]->defined) return perr(ps, line, "rule '%s' defined twice", ps->rules[r]->name);
        ps->rules[r]->defined = 1;
        ps->rules[r]->line = line;
        if (parse_alternatives(ps, r, 0)) return -1;
    }
}

/* Fills NULLABLE[r] (rule r matches the empty string), by fixpoint. */
static void rules_nullable(gparser *ps, char *nullable) {
    memset(nullable, 0, (size_t)ps->n_rules);
    for (int changed = 1; changed;) {
        changed = 0;
        for (int r = 0; r < ps->n_rules; r++) {
            if (nullable[r]) continue;
            const ivec *b = &ps->rules[r]->body;
            int ok = 1, any = 0; /* the current alternative is nullable so far; one was */
            for (size_t i = 0; i < b->n && !any; i++) {
                int32_t e = b->v[i];
                if (EL_TYPE(e) == EL_END) {
                    any = ok;
                    ok = 1;
                } else if (EL_TYPE(e) == EL_CLASS || !nullable[EL_VAL(e)]) {
                    ok = 0;
                }
            }
            if (any) {
                nullable[r] = 1;
                changed = 1;
            }
        }
    }
}

/* Depth-first search for a cycle of left calls from R (COLOR 0 new, 1 on the
 * path, 2 done). Returns the rule where a cycle closes, or -1. */
static int left_cycle(gparser *ps, int r, const char *nullable, char *color) {
    color[r] = 1;
    const ivec *b = &ps->rules[r]->body;
    int open = 1; /* still at the left edge of the alternative */
    for (size_t i = 0; i < b->n; i++) {
        int32_t e = b->v[i];
        if (EL_TYPE(e) == EL_END) {
            open = 1;
            continue;
        }
        if (!open) continue;
        if (EL_TYPE(e) == EL_CLASS) {
            open = 0;
            continue;
        }
        int s = EL_VAL(e);
        if (color[s] == 1) return s;
        if (color[s] == 0) {
            int c = left_cycle(ps, s, nullable, color);
            if (c >= 0) return c;
        }
        open = nullable[s];
    }
    color[r] = 2;
    return -1;
}

/* Checks that every rule is defined and none is left-recursive. Returns 0 or -1. */
static int rules_check(gparser *ps) {
    for (int r = 0; r < ps->n_rules; r++)
        if (!ps->rules[r]->defined)
            return perr(ps, ps->rules[r]->line, "undefined rule '%s'", ps->rules[r]->name);
    char *nullable = malloc((size_t)ps->n_rules), *color = calloc((size_t)ps->n_rules, 1);
    int rc = 0;
    if (!nullable || !color) {
        rc = oom(ps);
        goto cleanup;
    }
    rules_nullable(ps, nullable);
    for (int r = 0; r < ps->n_rules && !rc; r++) {
        int c = color[r] ? -1 : left_cycle(ps, r, nullable, color);
        if (c < 0) continue;
        const char *name = ps->rules[c]->name, *hash = strchr(name, '#');
        rc = hash ? perr(ps, ps->rules[c]->line, "left recursion in rule '%.*s' (a repeated item that may be empty)",
                         (int)(hash - name), name)
                  : perr(ps, ps->rules[c]->line, "left recursion in rule '%s'", name);
    }
cleanup:
    free(nullable);
    free(color);
    return rc;
}

/* Builds the compiled grammar from the parsed rules. Returns it or NULL (OOM). */
static grammar *rules_compile(gparser *ps, int root) {
    grammar *g = calloc(1, sizeof *g);
    size_t n_el = 0, n_alt = 0;
    if (!g) return NULL;
    for (int r = 0; r < ps->n_rules; r++) {
        n_el += ps->rules[r]->body.n;
        for (size_t i = 0; i < ps->rules[r]->body.n; i++) n_alt += EL_TYPE(ps->rules[r]->body.v[i]) == EL_END;
    }
    g->el = malloc((n_el + 1) * sizeof *g->el);
    g->alt = malloc((n_alt + 1) * sizeof *g->alt);
    g->alt_off = malloc(((size_t)ps->n_rules + 1) * sizeof *g->alt_off);
    g->cls = malloc(((size_t)ps->n_cls + 1) * sizeof *g->cls);
    if (!g->el || !g->alt || !g->alt_off || !g->cls) {
        grammar_free(g);
        return NULL;
    }
    if (ps->n_cls) memcpy(g->cls, ps->cls, (size_t)ps->n_cls * sizeof *g->cls);
    size_t at = 0, na = 0;
    for (int r = 0; r < ps->n_rules; r++) {
        const ivec *b = &ps->rules[r]->body;
        g->alt_off[r] = (int32_t)na;
        for (size_t i = 0; i < b->n; i++) {
            if (i == 0 || EL_TYPE(b->v[i - 1]) == EL_END) g->alt[na++] = (int32_t)(at + i);
            g->el[at + i] = b->v[i];
        }
        at += b->n;
    }
    g->alt_off[ps->n_rules] = (int32_t)na;
    g->n_rules = ps->n_rules;
    g->root = root;
    return g;
}

grammar *grammar_parse(const char *gbnf, const char *root, char *err, size_t errlen) {
    gparser ps = {.src = gbnf, .p = gbnf, .err = err, .errlen = errlen};
    grammar *g = NULL;
    if (err && errlen) err[0] = 0;
    if (parse_rules(&ps) || rules_check(&ps)) goto cleanup;
    int r;
    for (r = 0; r < ps.n_rules; r++)
        if (!strcmp(ps.rules[r]->name, root)) break;
    if (r == ps.n_rules) {
        perr(&ps, 0, "no rule named '%s'", root);
        goto cleanup;
    }
    if (!(g = rules_compile(&ps, r))) oom(&ps);
cleanup:
    for (int i = 0; i < ps.n_rules; i++) {
        free(ps.rules[i]->name);
        free(ps.rules[i]->body.v);
        free(ps.rules[i]);
    }
    free(ps.rules);
    free(ps.cls);
    return g;
}

void grammar_free(grammar *g) {
    if (!g) return;
    free(g->el);
    free(g->alt);
    free(g->alt_off);
    free(g->cls);
    free(g);
}

/* ------------------------------------------------------------------ */
/* Matcher: sets of stacks in a walker's arena                         */

#define WALKER_LOCAL 1024 /* int32s of arena inside the walker itself */

typedef struct {
    const grammar *g;
    ivec a;     /* the arena of serialized sets */
    size_t set; /* offset of the set being built */
    int oom;
    int32_t tmp[MAX_DEPTH + 1];
    int32_t local[WALKER_LOCAL]; /* the arena while it is small: no malloc for short walks */
} walker;

/* Starts W's arena with the LEN int32s of SET. Returns 0, or -1 when out of memory. */
static int walker_init(walker *w, const grammar *g, const int32_t *set, size_t len) {
    w->g = g;
    w->a = (ivec){.v = w->local, .cap = WALKER_LOCAL, .borrowed = 1};
    w->oom = 0;
    if (ivec_reserve(&w->a, len + 256)) return -1;
    if (len) memcpy(w->a.v, set, len * sizeof *set);
    w->a.n = len;
    return 0;
}

static void walker_free(walker *w) {
    if (!w->a.borrowed) free(w->a.v);
    w->a.v = NULL;
}

/* The number of int32s of the set at OFF. */
static size_t set_size(const int32_t *a, size_t off) {
    size_t p = off + 1;
    for (int32_t i = 0; i < a[off]; i++) p += 1 + (size_t)a[p];
    return p - off;
}

/* Adds the stack ST (DEPTH entries) to the set being built, unless present. */
static void walker_emit(walker *w, const int32_t *st, int depth) {
    int32_t *a = w->a.v;
    size_t p = w->set + 1;
    for (int32_t i = 0; i < a[w->set]; i++) {
        if (a[p] == depth && !memcmp(a + p + 1, st, (size_t)depth * sizeof *st)) return;
        p += 1 + (size_t)a[p];
    }
    if (ivec_reserve(&w->a, (size_t)depth + 1)) {
        w->oom = 1;
        return;
    }
    a = w->a.v;
    a[w->a.n++] = depth;
    memcpy(a + w->a.n, st, (size_t)depth * sizeof *st);
    w->a.n += (size_t)depth;
    a[w->set]++;
}

/* Emits every stack that ST (DEPTH entries, its top possibly a rule
 * reference or an alternative's end) leads to with a byte class on top, or
 * empty. Leaves ST as it found it. */
static void walker_expand(walker *w, int32_t *st, int depth) {
    const grammar *g = w->g;
    for (;;) {
        if (depth == 0) {
            walker_emit(w, st, 0);
            return;
        }
        int32_t pos = st[depth - 1], e = g->el[pos];
        if (EL_TYPE(e) == EL_END) {
            depth--;
            continue;
        }
        if (EL_TYPE(e) == EL_CLASS) {
            walker_emit(w, st, depth);
            return;
        }
        /* a call: the return position replaces the top, unless it is the end
         * of the alternative (tail call); each alternative goes on top */
        int r = EL_VAL(e), d = EL_TYPE(g->el[pos + 1]) == EL_END ? depth - 1 : depth;
        if (d >= MAX_DEPTH) return;
        int32_t saved = st[d];
        st[depth - 1] = pos + 1;
        for (int32_t i = g->alt_off[r]; i < g->alt_off[r + 1]; i++) {
            st[d] = g->alt[i];
            walker_expand(w, st, d + 1);
        }
        st[d] = saved;
        st[depth - 1] = pos;
        return;
    }
}

/* Starts a new set at the end of the arena. */
static void walker_begin(walker *w) {
    if (ivec_push(&w->a, 0)) {
        w->oom = 1;
        return;
    }
    w->set = w->a.n - 1;
}

/* Appends the set reached from the set at FROM over byte C. Returns its
 * offset, -1 when C is rejected (nothing appended), -2 when out of memory. */
static long walker_step(walker *w, size_t from, unsigned c) {
    const grammar *g = w->g;
    size_t start = w->a.n;
    walker_begin(w);
    if (w->oom) return -2;
    size_t p = from + 1;
    int32_t n = w->a.v[from];
    for (int32_t i = 0; i < n; i++) {
        int32_t len = w->a.v[p];
        if (len > 0) {
            int32_t top = w->a.v[p + (size_t)len];
            if (bset_has(&g->cls[EL_VAL(g->el[top])], c)) {
                memcpy(w->tmp, w->a.v + p + 1, (size_t)len * sizeof *w->tmp);
                w->tmp[len - 1] = top + 1;
                walker_expand(w, w->tmp, len);
            }
        }
        p += 1 + (size_t)len;
    }
    if (w->oom) return -2;
    if (w->a.v[start] == 0) {
        w->a.n = start;
        return -1;
    }
    return (long)start;
}

/* The union of the classes on top of the set at OFF into FIRST; returns 1
 * when the set holds an empty stack (root may end). */
static int set_first(const grammar *g, const int32_t *a, size_t off, bset *first) {
    int done = 0;
    size_t p = off + 1;
    memset(first, 0, sizeof *first);
    for (int32_t i = 0; i < a[off]; i++) {
        int32_t len = a[p];
        if (len == 0)
            done = 1;
        else
            bset_or(first, &g->cls[EL_VAL(g->el[a[p + (size_t)len]])]);
        p += 1 + (size_t)len;
    }
    return done;
}

/* ------------------------------------------------------------------ */
/* States                                                              */

struct grammar_state {
    const grammar *g;
    int32_t *set;
    size_t len;
};

/* A state holding the set at OFF of W's arena. Returns it or NULL. */
static grammar_state *state_from(const grammar *g, const int32_t *a, size_t off) {
    grammar_state *s = malloc(sizeof *s);
    size_t len = set_size(a, off);
    if (!s || !(s->set = malloc(len * sizeof *s->set))) {
        free(s);
        return NULL;
    }
    memcpy(s->set, a + off, len * sizeof *s->set);
    s->g = g;
    s->len = len;
    return s;
}

grammar_state *grammar_state_new(const grammar *g) {
    walker wk, *w = &wk;
    grammar_state *s = NULL;
    if (walker_init(w, g, NULL, 0)) goto cleanup;
    walker_begin(w);
    for (int32_t i = g->alt_off[g->root]; i < g->alt_off[g->root + 1] && !w->oom; i++) {
        w->tmp[0] = g->alt[i]; /* a one-entry stack: root's alternative, returning nowhere */
        walker_expand(w, w->tmp, 1);
    }
    if (!w->oom) s = state_from(g, w->a.v, 0);
cleanup:
    walker_free(w);
    return s;
}

grammar_state *grammar_state_clone(const grammar_state *s) { return state_from(s->g, s->set, 0); }

void grammar_state_free(grammar_state *s) {
    if (!s) return;
    free(s->set);
    free(s);
}

int grammar_state_accept(grammar_state *s, const char *bytes, size_t n) {
    walker wk, *w = &wk;
    int rc = -2;
    if (walker_init(w, s->g, s->set, s->len)) goto cleanup;
    for (size_t i = 0; i < n; i++) {
        long off = walker_step(w, 0, (unsigned char)bytes[i]);
        if (off < 0) {
            rc = (int)off;
            goto cleanup;
        }
        /* keep only the newest set, at the start of the arena */
        memmove(w->a.v, w->a.v + off, (w->a.n - (size_t)off) * sizeof *w->a.v);
        w->a.n -= (size_t)off;
    }
    int32_t *set = malloc(w->a.n * sizeof *set);
    if (!set) goto cleanup;
    memcpy(set, w->a.v, w->a.n * sizeof *set);
    free(s->set);
    s->set = set;
    s->len = w->a.n;
    rc = 0;
cleanup:
    walker_free(w);
    return rc;
}

int grammar_state_done(const grammar_state *s) {
    bset first;
    return set_first(s->g, s->set, 0, &first);
}

int grammar_state_more(const grammar_state *s) {
    bset first;
    set_first(s->g, s->set, 0, &first);
    return bset_count(&first) > 0;
}

size_t grammar_state_forced(const grammar_state *s, char *buf, size_t cap) {
    walker wk, *w = &wk;
    size_t n = 0, off = 0;
    if (walker_init(w, s->g, s->set, s->len)) goto cleanup;
    while (n < cap) {
        bset first;
        if (set_first(s->g, w->a.v, off, &first) || bset_count(&first) != 1) break;
        unsigned c = 0;
        while (!bset_has(&first, c)) c++;
        long next = walker_step(w, off, c);
        if (next < 0) break;
        buf[n++] = (char)c;
        off = (size_t)next;
    }
cleanup:
    walker_free(w);
    return n;
}

/* ------------------------------------------------------------------ */
/* Vocabulary trie and token masks                                     */

/* Trie nodes are numbered in preorder; node 0 is the root (the empty
 * prefix). The subtree of n is n..end[n]-1, its first child n+1 (when
 * n+1 < end[n]) and the sibling after a child c is end[c]. Tokens are listed
 * in preorder of the node where their piece ends: those ending at n are
 * toks[tok_at[n]..tok_at[n+1]), those in n's subtree toks[tok_at[n]..tok_at[end[n]]). */
struct grammar_vocab {
    int n_vocab, n_nodes, max_len;
    uint8_t *byte;   /* the byte of the edge into each node */
    int32_t *end;    /* n_nodes */
    int32_t *tok_at; /* n_nodes + 1 */
    int32_t *toks;
    uint32_t *sub;   /* per node: index into maps of the bytes on the edges below it */
    uint8_t *utf8;   /* per node: 1 when the bytes below it are whole UTF-8 characters (the last may be cut) */
    bset *maps;
    char *bytes;     /* every piece, concatenated */
    size_t *off;     /* n_vocab + 1: token i is bytes[off[i]..off[i+1]) */
};

void grammar_vocab_free(grammar_vocab *v) {
    if (!v) return;
    free(v->byte);
    free(v->end);
    free(v->tok_at);
    free(v->toks);
    free(v->sub);
    free(v->utf8);
    free(v->maps);
    free(v->bytes);
    free(v->off);
    free(v);
}

static int piece_cmp(const void *pa, const void *pb, void *ctx) {
    const grammar_vocab *v = ctx;
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    size_t la = v->off[a + 1] - v->off[a], lb = v->off[b + 1] - v->off[b];
    int c = memcmp(v->bytes + v->off[a], v->bytes + v->off[b], la < lb ? la : lb);
    if (c) return c;
    if (la != lb) return la < lb ? -1 : 1;
    return a < b ? -1 : a > b;
}

/* Copies the pieces and lists the non-empty ones, sorted, in v->toks. Returns 0 or -1. */
static int vocab_copy(grammar_vocab *v, const char *const *pieces, const size_t *lens, int *n_toks,
                      size_t *total) {
    size_t sum = 0;
    for (int i = 0; i < v->n_vocab; i++) sum += pieces[i] ? lens[i] : 0;
    v->bytes = malloc(sum + 1);
    v->off = malloc(((size_t)v->n_vocab + 1) * sizeof *v->off);
    v->toks = malloc(((size_t)v->n_vocab + 1) * sizeof *v->toks);
    if (!v->bytes || !v->off || !v->toks) return -1;
    size_t at = 0;
    int n = 0;
    for (int i = 0; i < v->n_vocab; i++) {
        v->off[i] = at;
        if (!pieces[i] || !lens[i]) continue;
        memcpy(v->bytes + at, pieces[i], lens[i]);
        at += lens[i];
        v->toks[n++] = i;
        if ((int)lens[i] > v->max_len) v->max_len = (int)lens[i];
    }
    v->off[v->n_vocab] = at;
    qsort_r(v->toks, (size_t)n, sizeof *v->toks, piece_cmp, v);
    *n_toks = n;
    *total = sum;
    return 0;
}

/* Builds the trie over the sorted tokens: byte, tok_at, end. PARENT gets each
 * node's parent. Returns 0 or -1. */
static int vocab_trie(grammar_vocab *v, int n_toks, size_t max_nodes, int32_t **parent_out) {
    int32_t *parent = malloc(max_nodes * sizeof *parent), *path = malloc(((size_t)v->max_len + 1) * sizeof *path);
    v->byte = malloc(max_nodes);
    v->end = malloc(max_nodes * sizeof *v->end);
    v->tok_at = malloc((max_nodes + 1) * sizeof *v->tok_at);
    *parent_out = parent;
    if (!parent || !path || !v->byte || !v->end || !v->tok_at) {
        free(path);
        return -1;
    }
    int32_t n = 1;
    size_t depth = 0; /* path[0..depth] = the nodes of the previous piece */
    const char *prev = NULL;
    path[0] = 0;
    parent[0] = -1;
    v->byte[0] = 0;
    v->tok_at[0] = 0;
    for (int t = 0; t < n_toks; t++) {
        int32_t id = v->toks[t];
        const char *p = v->bytes + v->off[id];
        size_t len = v->off[id + 1] - v->off[id], common = 0;
        while (prev && common < depth && common < len && p[common] == prev[common]) common++;
        for (depth = common; depth < len; depth++) {
            parent[n] = path[depth];
            v->byte[n] = (uint8_t)p[depth];
            v->tok_at[n] = t;
            path[depth + 1] = n++;
        }
        prev = p;
    }
    v->tok_at[n] = n_toks;
    v->n_nodes = n;
    for (int32_t i = 0; i < n; i++) v->end[i] = i + 1;
    for (int32_t i = n - 1; i > 0; i--)
        if (v->end[i] > v->end[parent[i]]) v->end[parent[i]] = v->end[i];
    free(path);
    return 0;
}

/* Fills sub/maps: the set of bytes below each node, deduplicated. Returns 0 or -1. */
static int vocab_submaps(grammar_vocab *v, const int32_t *parent) {
    size_t n = (size_t)v->n_nodes, hcap = 1024;
    while (hcap < 2 * n) hcap *= 2;
    bset *below = calloc(n, sizeof *below);
    int32_t *hash = malloc(hcap * sizeof *hash);
    v->sub = malloc(n * sizeof *v->sub);
    v->maps = malloc(n * sizeof *v->maps);
    int rc = -1, n_maps = 0;
    if (!below || !hash || !v->sub || !v->maps) goto cleanup;
    for (size_t i = n - 1; i > 0; i--) {
        bset_or(&below[parent[i]], &below[i]);
        bset_add(&below[parent[i]], v->byte[i]);
    }
    memset(hash, 0xff, hcap * sizeof *hash);
    for (size_t i = 0; i < n; i++) {
        uint64_t h = 1469598103934665603ull;
        for (int k = 0; k < 4; k++) h = (h ^ below[i].w[k]) * 1099511628211ull;
        size_t at = (size_t)(h ^ (h >> 29)) & (hcap - 1);
        while (hash[at] >= 0 && memcmp(&v->maps[hash[at]], &below[i], sizeof *below)) at = (at + 1) & (hcap - 1);
        if (hash[at] < 0) {
            v->maps[n_maps] = below[i];
            hash[at] = n_maps++;
        }
        v->sub[i] = (uint32_t)hash[at];
    }
    rc = 0;
cleanup:
    free(below);
    free(hash);
    return rc;
}

/* The continuation bytes a UTF-8 lead byte C announces (as the JSON string
 * rule has it: [\xc2-\xdf], [\xe0-\xef], [\xf0-\xf4]), 0 for ASCII, -1 for a
 * byte that cannot start a character. */
static int utf8_follow(unsigned c) {
    return c < 0x80 ? 0 : c >= 0xc2 && c <= 0xdf ? 1 : c >= 0xe0 && c <= 0xef ? 2 : c >= 0xf0 && c <= 0xf4 ? 3 : -1;
}

/* Fills v->utf8: bit k of ok[n] says the bytes below n are valid when k
 * continuation bytes are pending at n; utf8[n] keeps bit 0. Returns 0 or -1. */
static int vocab_utf8(grammar_vocab *v, const int32_t *parent) {
    uint8_t *ok = malloc((size_t)v->n_nodes);
    v->utf8 = malloc((size_t)v->n_nodes);
    if (!ok || !v->utf8) {
        free(ok);
        return -1;
    }
    memset(ok, 0xf, (size_t)v->n_nodes);
    for (int32_t n = v->n_nodes - 1; n > 0; n--) { /* children before parents */
        unsigned c = v->byte[n];
        int f = utf8_follow(c);
        for (int k = 0; k < 4; k++) {
            int next = k > 0 ? ((c & 0xc0) == 0x80 ? k - 1 : -1) : f;
            if (next < 0 || !(ok[n] >> next & 1)) ok[parent[n]] &= (uint8_t)~(1u << k);
        }
    }
    for (int32_t n = 0; n < v->n_nodes; n++) v->utf8[n] = ok[n] & 1;
    free(ok);
    return 0;
}

grammar_vocab *grammar_vocab_new(int n_vocab, const char *const *pieces, const size_t *lens) {
    grammar_vocab *v = calloc(1, sizeof *v);
    int32_t *parent = NULL;
    int n_toks = 0;
    size_t total = 0;
    if (!v) return NULL;
    v->n_vocab = n_vocab;
    if (vocab_copy(v, pieces, lens, &n_toks, &total) || vocab_trie(v, n_toks, total + 1, &parent) ||
        vocab_submaps(v, parent) || vocab_utf8(v, parent)) {
        grammar_vocab_free(v);
        v = NULL;
    }
    free(parent);
    return v;
}

int grammar_token_ok(const grammar_state *s, const grammar_vocab *v, int id) {
    if (id < 0 || id >= v->n_vocab || v->off[id] == v->off[id + 1]) return 0;
    walker wk, *w = &wk;
    int ok = 0;
    if (walker_init(w, s->g, s->set, s->len)) goto cleanup;
    long off = 0;
    for (size_t i = v->off[id]; i < v->off[id + 1] && off >= 0; i++)
        off = walker_step(w, (size_t)off, (unsigned char)v->bytes[i]);
    ok = off >= 0;
cleanup:
    walker_free(w);
    return ok;
}

/* Token masks intern the sets met during one call (a DFA built lazily): the
 * walker's arena keeps every distinct set. When the trie walk first enters a
 * set, the bytes leading back to it are found; the sets other bytes lead to
 * are interned the first time the walk takes that byte. */
enum { NEXT_REJECT = -1, NEXT_UNKNOWN = -2 };

typedef struct {
    int32_t next[256]; /* the set reached over each byte, or NEXT_* */
    bset same;         /* the bytes that lead back to this set */
    size_t off;        /* where the set lies in the arena */
    uint64_t hash;
    int filled;        /* next and same are known */
    int8_t loop[4];    /* loop[k]: every k continuation bytes lead to loop_home[k] (-1 not known) */
    int32_t loop_home[4];
} dstate;

typedef struct {
    walker w;
    const grammar_vocab *v;
    uint8_t *allowed;
    dstate *st;
    int n_st, cap_st;
    int32_t *table; /* open addressing over st, -1 empty */
    size_t table_cap;
    int count;
} masker;

static uint64_t set_hash(const int32_t *a, size_t len) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) h = (h ^ (uint32_t)a[i]) * 1099511628211ull;
    return h ^ (h >> 32);
}

/* Doubles the table (or creates it). Returns 0 or -1. */
static int masker_rehash(masker *m) {
    size_t cap = m->table_cap ? 2 * m->table_cap : 256;
    int32_t *t = malloc(cap * sizeof *t);
    if (!t) return -1;
    memset(t, 0xff, cap * sizeof *t);
    for (int i = 0; i < m->n_st; i++) {
        size_t at = m->st[i].hash & (cap - 1);
        while (t[at] >= 0) at = (at + 1) & (cap - 1);
        t[at] = i;
    }
    free(m->table);
    m->table = t;
    m->table_cap = cap;
    return 0;
}

/* The id of the set at OFF, the arena's last set: an earlier equal set (the
 * arena is then truncated to OFF) or a new one. Returns the id or -1 (OOM). */
static int masker_intern(masker *m, size_t off) {
    size_t len = m->w.a.n - off;
    uint64_t h = set_hash(m->w.a.v + off, len);
    if ((size_t)m->n_st * 2 >= m->table_cap && masker_rehash(m)) return -1;
    size_t at = h & (m->table_cap - 1);
    for (; m->table[at] >= 0; at = (at + 1) & (m->table_cap - 1)) {
        const dstate *d = &m->st[m->table[at]];
        if (d->hash == h && set_size(m->w.a.v, d->off) == len &&
            !memcmp(m->w.a.v + d->off, m->w.a.v + off, len * sizeof(int32_t))) {
            m->w.a.n = off;
            return m->table[at];
        }
    }
    if (m->n_st == m->cap_st) {
        int cap = m->cap_st ? 2 * m->cap_st : 64;
        dstate *n = realloc(m->st, (size_t)cap * sizeof *n);
        if (!n) return -1;
        m->st = n;
        m->cap_st = cap;
    }
    int id = m->n_st++;
    m->st[id].off = off;
    m->st[id].hash = h;
    m->st[id].filled = 0;
    memset(m->st[id].loop, 0xff, sizeof m->st[id].loop);
    m->table[at] = id;
    return id;
}

/* Finds which bytes set ID rejects and which lead back to it. Returns 0 or -1 (OOM). */
static int masker_fill(masker *m, int id) {
    dstate *d = &m->st[id];
    bset first;
    size_t len = set_size(m->w.a.v, d->off);
    set_first(m->w.g, m->w.a.v, d->off, &first);
    memset(&d->same, 0, sizeof d->same);
    for (unsigned c = 0; c < 256; c++) {
        d->next[c] = NEXT_REJECT;
        if (!bset_has(&first, c)) continue;
        long r = walker_step(&m->w, d->off, c);
        if (r == -2) return -1;
        if (r < 0) continue;
        if (m->w.a.n - (size_t)r == len && !memcmp(m->w.a.v + r, m->w.a.v + d->off, len * sizeof(int32_t))) {
            d->next[c] = id;
            bset_add(&d->same, c);
        } else {
            d->next[c] = NEXT_UNKNOWN;
        }
        m->w.a.n = (size_t)r;
    }
    d->filled = 1;
    return 0;
}

/* The set that set ID (filled) reaches over byte C, or NEXT_REJECT; -3 on OOM. */
static int masker_next(masker *m, int id, unsigned c) {
    int to = m->st[id].next[c];
    if (to != NEXT_UNKNOWN) return to;
    long r = walker_step(&m->w, m->st[id].off, c);
    if (r < 0) return r == -2 ? -3 : NEXT_REJECT;
    if ((to = masker_intern(m, (size_t)r)) < 0) return -3;
    m->st[id].next[c] = to;
    return to;
}

/* 1 when from set ID every sequence of K UTF-8 continuation bytes is
 * accepted and leads to set HOME; 0 when not; -1 on OOM. Memoized per set and HOME. */
static int masker_cont(masker *m, int id, int k, int home) {
    if (k == 0) return id == home;
    if (m->st[id].loop[k] >= 0 && m->st[id].loop_home[k] == home) return m->st[id].loop[k];
    if (!m->st[id].filled && masker_fill(m, id)) return -1;
    int ok = 1;
    for (unsigned c = 0x80; c < 0xc0 && ok == 1; c++) {
        int to = masker_next(m, id, c);
        ok = to == -3 ? -1 : to < 0 ? 0 : masker_cont(m, to, k - 1, home);
    }
    if (ok >= 0) {
        m->st[id].loop[k] = (int8_t)ok;
        m->st[id].loop_home[k] = home;
    }
    return ok;
}

/* 1 when every whole UTF-8 character from set ID leads back to it (the
 * inside of a JSON string); 0 when not; -1 on OOM. Kept in loop[0]. */
static int masker_utf8_loop(masker *m, int id) {
    if (m->st[id].loop[0] >= 0) return m->st[id].loop[0];
    int ok = 1;
    for (unsigned c = 0xc2; c <= 0xf4 && ok == 1; c++) {
        int to = masker_next(m, id, c);
        ok = to == -3 ? -1 : to < 0 ? 0 : masker_cont(m, to, utf8_follow(c), id);
    }
    if (ok >= 0) m->st[id].loop[0] = (int8_t)ok;
    return ok;
}

/* 1 when every token below trie node NODE is accepted from set ID as a
 * whole: its bytes all lead back to ID, or its ASCII bytes do and the rest
 * are whole UTF-8 characters that do too. -1 on OOM. */
static int mask_whole(masker *m, int32_t node, int id) {
    const grammar_vocab *v = m->v;
    const bset *below = &v->maps[v->sub[node]], *same = &m->st[id].same;
    if (bset_subset(below, same)) return 1;
    if (!v->utf8[node] || (below->w[0] & ~same->w[0]) || (below->w[1] & ~same->w[1])) return 0;
    return masker_utf8_loop(m, id);
}

static void mask_range(masker *m, int32_t lo, int32_t hi) {
    const int32_t *toks = m->v->toks; /* locals: stores through uint8_t* alias everything */
    uint8_t *allowed = m->allowed;
    for (int32_t i = lo; i < hi; i++) allowed[toks[i]] = 1;
    m->count += hi - lo;
}

/* Marks the tokens at and below trie node NODE (the root: only below),
 * reached in set ID: all at once when every byte below leads back to ID.
 * Returns 0 or -1 (OOM). */
static int mask_walk(masker *m, int32_t node, int id) {
    const grammar_vocab *v = m->v;
    if (!m->st[id].filled && masker_fill(m, id)) return -1;
    int whole = mask_whole(m, node, id);
    if (whole < 0) return -1;
    if (whole) {
        mask_range(m, v->tok_at[node], v->tok_at[v->end[node]]);
        return 0;
    }
    mask_range(m, v->tok_at[node], v->tok_at[node + 1]);
    for (int32_t c = node + 1; c < v->end[node]; c = v->end[c]) {
        int to = masker_next(m, id, v->byte[c]);
        if (to == -3 || (to >= 0 && mask_walk(m, c, to))) return -1;
    }
    return 0;
}

int grammar_token_mask(const grammar_state *s, const grammar_vocab *v, uint8_t *allowed) {
    masker *m = calloc(1, sizeof *m);
    int rc = -1;
    memset(allowed, 0, (size_t)v->n_vocab);
    if (!m) return -1;
    m->v = v;
    m->allowed = allowed;
    if (walker_init(&m->w, s->g, s->set, s->len) || masker_intern(m, 0) != 0 || mask_walk(m, 0, 0)) goto cleanup;
    rc = m->count;
cleanup:
    walker_free(&m->w);
    free(m->st);
    free(m->table);
    free(m);
    return rc;
}

/* ------------------------------------------------------------------ */
/* JSON Schema -> GBNF                                                 */

typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void sb_put(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

static void sb_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    for (int i = 0; i <= n; i++) sb_add(b, " ", 1); /* room for the text and its NUL */
    if (b->oom) return;
    b->n -= (size_t)n + 1;
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)n;
}

/* Appends LEN bytes as a GBNF literal "..". */
static void sb_literal(sbuf *b, const char *s, size_t len) {
    sb_put(b, "\"");
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            sb_printf(b, "\\%c", c);
        else if (c >= 0x20 && c < 0x7f)
            sb_add(b, (const char *)&c, 1);
        else
            sb_printf(b, "\\x%02x", c);
    }
    sb_put(b, "\"");
}

/* Appends the JSON text of the string S (UTF-8 kept, as json.dumps(ensure_ascii=False)). */
static void sb_json_string(sbuf *b, const char *s) {
    sb_put(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        const char *esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                        : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
        if (esc)
            sb_put(b, esc);
        else if (c < 0x20)
            sb_printf(b, "\\u%04x", c);
        else
            sb_add(b, (const char *)&c, 1);
    }
    sb_put(b, "\"");
}

/* Appends the JSON text of J with json.dumps spacing. */
static void sb_json(sbuf *b, const cJSON *j) {
    if (cJSON_IsString(j)) {
        sb_json_string(b, j->valuestring);
    } else if (cJSON_IsArray(j) || cJSON_IsObject(j)) {
        int obj = cJSON_IsObject(j);
        sb_put(b, obj ? "{" : "[");
        for (const cJSON *e = j->child; e; e = e->next) {
            if (obj) {
                sb_json_string(b, e->string);
                sb_put(b, ": ");
            }
            sb_json(b, e);
            if (e->next) sb_put(b, ", ");
        }
        sb_put(b, obj ? "}" : "]");
    } else {
        char *t = cJSON_PrintUnformatted(j);
        if (!t) {
            b->oom = 1;
            return;
        }
        sb_put(b, t);
        cJSON_free(t);
    }
}

enum { NEED_VALUE = 1, NEED_OBJECT = 2, NEED_ARRAY = 4, NEED_STRING = 8, NEED_CHAR = 16, NEED_NUMBER = 32,
       NEED_INTEGER = 64, NEED_UINT = 128 };

typedef struct {
    sbuf out;
    const char *name;
    const cJSON *root;
    int counter;
    unsigned need;
    char **ref_ptr, **ref_rule;
    int n_refs;
    char *err;
    size_t errlen;
    int failed;
} conv;

static int cerr(conv *c, const char *fmt, ...) {
    if (c->failed) return -1;
    c->failed = 1;
    va_list ap;
    va_start(ap, fmt);
    if (c->err && c->errlen) vsnprintf(c->err, c->errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static int conv_expr(conv *c, const cJSON *s, sbuf *e);

/* Appends `NAME-SUFFIX ::= BODY` to the output. */
static void conv_rule(conv *c, const char *rule, const sbuf *body) {
    sb_printf(&c->out, "%s ::= ", rule);
    if (body->s) sb_put(&c->out, body->s);
    sb_put(&c->out, "\n");
    if (body->oom) c->out.oom = 1;
}

/* Writes a fresh helper rule name into NAME (cap 128). */
static void conv_fresh(conv *c, char *name) { snprintf(name, 128, "%.100s-%d", c->name, ++c->counter); }

/* Defines a fresh rule for schema S and appends its name to E. Returns 0 or -1. */
static int conv_subrule(conv *c, const cJSON *s, sbuf *e) {
    char name[128];
    sbuf body = {0};
    conv_fresh(c, name);
    int rc = conv_expr(c, s, &body);
    if (!rc) conv_rule(c, name, &body);
    free(body.s);
    sb_put(e, name);
    return rc;
}

/* Resolves the local JSON pointer REF ("#", "#/$defs/a", "#/definitions/a/properties/b"). */
static const cJSON *conv_resolve(conv *c, const char *ref) {
    if (ref[0] != '#') return NULL;
    const cJSON *at = c->root;
    const char *p = ref + 1;
    while (*p == '/' && at) {
        char key[256];
        size_t k = 0;
        for (p++; *p && *p != '/'; p++) {
            char ch = *p;
            if (ch == '~' && (p[1] == '0' || p[1] == '1')) ch = *++p == '0' ? '~' : '/';
            if (k + 1 < sizeof key) key[k++] = ch;
        }
        key[k] = 0;
        at = cJSON_IsArray(at) ? cJSON_GetArrayItem(at, atoi(key)) : cJSON_GetObjectItemCaseSensitive(at, key);
    }
    return *p ? NULL : at;
}

/* Appends the rule name standing for $ref REF to E, defining it on first use. Returns 0 or -1. */
static int conv_ref(conv *c, const char *ref, sbuf *e) {
    for (int i = 0; i < c->n_refs; i++)
        if (!strcmp(c->ref_ptr[i], ref)) {
            sb_put(e, c->ref_rule[i]);
            return 0;
        }
    const cJSON *target = conv_resolve(c, ref);
    if (!target) return cerr(c, "unresolved $ref '%s'", ref);
    char name[128], *pc, *rc_;
    int n = snprintf(name, sizeof name, "%.60s-ref%d-", c->name, c->n_refs);
    for (const char *p = ref; *p && n < 120; p++)
        if (isalnum((unsigned char)*p)) name[n++] = *p;
    name[n] = 0;
    char **np = realloc(c->ref_ptr, ((size_t)c->n_refs + 1) * sizeof *np);
    if (np) c->ref_ptr = np;
    char **nr = realloc(c->ref_rule, ((size_t)c->n_refs + 1) * sizeof *nr);
    if (nr) c->ref_rule = nr;
    pc = strdup(ref);
    rc_ = strdup(name);
    if (!np || !nr || !pc || !rc_) {
        free(pc);
        free(rc_);
        return cerr(c, "out of memory");
    }
    c->ref_ptr[c->n_refs] = pc;
    c->ref_rule[c->n_refs++] = rc_;
    sbuf body = {0};
    int rc = conv_expr(c, target, &body); /* recursion finds the name registered */
    if (!rc) conv_rule(c, name, &body);
    free(body.s);
    sb_put(e, name);
    return rc;
}

/* Appends a primitive helper (NAME-string, ...) to E and notes that it is needed. */
static void conv_prim(conv *c, unsigned need, const char *suffix, sbuf *e) {
    c->need |= need;
    sb_printf(e, "%s-%s", c->name, suffix);
}

/* An array of schemas as alternatives ( a | b | ... ). Returns 0 or -1. */
static int conv_alts(conv *c, const cJSON *arr, sbuf *e) {
    if (!cJSON_IsArray(arr) || !arr->child) return cerr(c, "anyOf/oneOf needs a non-empty array");
    sb_put(e, "(");
    for (const cJSON *m = arr->child; m; m = m->next) {
        if (conv_expr(c, m, e)) return -1;
        if (m->next) sb_put(e, " | ");
    }
    sb_put(e, ")");
    return 0;
}

static long num_kw(const cJSON *s, const char *key, long dflt) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(s, key);
    return cJSON_IsNumber(j) && j->valuedouble >= 0 ? (long)j->valuedouble : dflt;
}

/* An upper bound (maxLength, maxItems), or -1 when absent or above
 * CONV_MAX_BOUND: a bound that large is a safety cap in the schemas agents
 * send (Claude Code's tools say maxLength 1000000), and honouring it would
 * take as many grammar rules, so it is not enforced. */
#define CONV_MAX_BOUND 512
static long max_kw(const cJSON *s, const char *key) {
    long max = num_kw(s, key, -1);
    return max > CONV_MAX_BOUND ? -1 : max;
}

/* The literal `"KEY": ` of property P followed by the expression of its schema. Returns 0 or -1. */
static int conv_pair(conv *c, const cJSON *p, sbuf *e) {
    sbuf key = {0};
    sb_json_string(&key, p->string);
    sb_put(&key, ": ");
    sb_literal(e, key.s ? key.s : "", key.n);
    if (key.oom) e->oom = 1;
    free(key.s);
    sb_put(e, " ");
    return conv_expr(c, p, e);
}

/* "key": value pairs for the schema S of type object. Returns 0 or -1.
 * With props p0..pk-1 in order: F_i = what may follow '{' when p0..pi-1 were
 * skipped, A_i = what may follow once something was written; optional
 * properties may be skipped, extra pairs (when allowed) come last. */
static int conv_object(conv *c, const cJSON *s, sbuf *e) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *add = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    int k = cJSON_IsObject(props) ? cJSON_GetArraySize(props) : 0, rc = -1;
    char (*A)[128] = malloc(((size_t)k + 1) * sizeof *A), (*F)[128] = malloc(((size_t)k + 1) * sizeof *F);
    const cJSON **p = malloc(((size_t)k + 1) * sizeof *p);
    sbuf extra = {0}, body = {0};
    if (!A || !F || !p) {
        rc = cerr(c, "out of memory");
        goto cleanup;
    }
    int i = 0;
    for (const cJSON *q = k ? props->child : NULL; q; q = q->next) p[i++] = q;
    /* no properties and no additionalProperties: any object; absent otherwise: no extra keys */
    int extras = (!add && !k) || cJSON_IsTrue(add) || cJSON_IsObject(add);
    if (extras) {
        conv_prim(c, NEED_STRING, "string", &extra);
        sb_put(&extra, " \": \" ");
        if (cJSON_IsObject(add) ? conv_expr(c, add, &extra) : (conv_prim(c, NEED_VALUE, "value", &extra), 0))
            goto cleanup;
    }
    conv_fresh(c, A[k]);
    conv_fresh(c, F[k]);
    if (extras) sb_printf(&body, "(\", \" %s)*", extra.s);
    conv_rule(c, A[k], &body);
    body.n = 0;
    if (extras) sb_printf(&body, "(%s (\", \" %s)*)?", extra.s, extra.s);
    conv_rule(c, F[k], &body);
    for (i = k - 1; i >= 0; i--) {
        int required = 0;
        for (const cJSON *r = cJSON_IsArray(req) ? req->child : NULL; r; r = r->next)
            required |= cJSON_IsString(r) && !strcmp(r->valuestring, p[i]->string);
        sbuf kv = {0};
        int bad = conv_pair(c, p[i], &kv);
        conv_fresh(c, A[i]);
        conv_fresh(c, F[i]);
        body.n = 0;
        sb_printf(&body, "\", \" %s %s", kv.s ? kv.s : "", A[i + 1]);
        if (!required) sb_printf(&body, " | %s", A[i + 1]);
        conv_rule(c, A[i], &body);
        body.n = 0;
        sb_printf(&body, "%s %s", kv.s ? kv.s : "", A[i + 1]);
        if (!required) sb_printf(&body, " | %s", F[i + 1]);
        conv_rule(c, F[i], &body);
        if (kv.oom) c->out.oom = 1;
        free(kv.s);
        if (bad) goto cleanup;
    }
    sb_printf(e, "\"{\" %s \"}\"", F[0]);
    rc = 0;
cleanup:
    free(A);
    free(F);
    free(p);
    free(extra.s);
    free(body.s);
    return rc;
}

/* "[" items "]" for the schema S of type array. Returns 0 or -1. */
static int conv_array(conv *c, const cJSON *s, sbuf *e) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
    if (cJSON_IsArray(items)) prefix = items;
    if (cJSON_IsArray(prefix)) { /* a tuple: exactly these items */
        sb_put(e, "\"[\" ");
        for (const cJSON *m = prefix->child; m; m = m->next) {
            if (conv_expr(c, m, e)) return -1;
            sb_put(e, m->next ? " \", \" " : " ");
        }
        sb_put(e, "\"]\"");
        return 0;
    }
    long min = num_kw(s, "minItems", 0), max = max_kw(s, "maxItems");
    if (max == 0) {
        sb_put(e, "\"[]\"");
        return 0;
    }
    sbuf item = {0};
    int rc = cJSON_IsObject(items) || cJSON_IsBool(items) ? conv_subrule(c, items, &item)
                                                         : (conv_prim(c, NEED_VALUE, "value", &item), 0);
    if (!rc) {
        char rep[64];
        long lo = min > 0 ? min - 1 : 0;
        if (max < 0)
            snprintf(rep, sizeof rep, "{%ld,}", lo);
        else
            snprintf(rep, sizeof rep, "{%ld,%ld}", lo, max - 1);
        sb_printf(e, min > 0 ? "\"[\" %s (\", \" %s)%s \"]\"" : "\"[\" (%s (\", \" %s)%s)? \"]\"", item.s, item.s,
                  rep);
    }
    if (item.oom) c->out.oom = 1;
    free(item.s);
    return rc;
}

/* A string with minLength/maxLength (in JSON string characters: a byte
 * below 0x80, a UTF-8 sequence or an escape each count one). */
static void conv_string(conv *c, const cJSON *s, sbuf *e) {
    long min = num_kw(s, "minLength", 0), max = max_kw(s, "maxLength");
    if (min == 0 && max < 0) {
        conv_prim(c, NEED_STRING, "string", e);
        return;
    }
    sb_put(e, "\"\\\"\" ");
    conv_prim(c, NEED_CHAR, "char", e);
    if (max < 0)
        sb_printf(e, "{%ld,}", min);
    else
        sb_printf(e, "{%ld,%ld}", min, max < min ? min : max);
    sb_put(e, " \"\\\"\"");
}

/* The expression for schema S of the single type T. Returns 0 or -1. */
static int conv_typed(conv *c, const cJSON *s, const char *t, sbuf *e) {
    if (!strcmp(t, "object")) return conv_object(c, s, e);
    if (!strcmp(t, "array")) return conv_array(c, s, e);
    if (!strcmp(t, "string")) {
        conv_string(c, s, e);
    } else if (!strcmp(t, "number")) {
        conv_prim(c, NEED_NUMBER, "number", e);
    } else if (!strcmp(t, "integer")) {
        const cJSON *lo = cJSON_GetObjectItemCaseSensitive(s, "minimum");
        if (!lo) lo = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMinimum");
        int unsig = cJSON_IsNumber(lo) && lo->valuedouble >= 0;
        conv_prim(c, unsig ? NEED_UINT : NEED_INTEGER, unsig ? "uint" : "integer", e);
    } else if (!strcmp(t, "boolean")) {
        sb_put(e, "(\"true\" | \"false\")");
    } else if (!strcmp(t, "null")) {
        sb_put(e, "\"null\"");
    } else {
        return cerr(c, "unknown type '%s'", t);
    }
    return 0;
}

/* The expression for the type keyword(s) of S (or what its keywords imply). Returns 0 or -1. */
static int conv_types(conv *c, const cJSON *s, sbuf *e) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    const cJSON *nullable = cJSON_GetObjectItemCaseSensitive(s, "nullable");
    int nul = cJSON_IsTrue(nullable);
    sb_put(e, "(");
    if (cJSON_IsString(type)) {
        if (conv_typed(c, s, type->valuestring, e)) return -1;
    } else if (cJSON_IsArray(type) && type->child) {
        for (const cJSON *t = type->child; t; t = t->next) {
            if (!cJSON_IsString(t)) return cerr(c, "type array with a non-string");
            if (conv_typed(c, s, t->valuestring, e)) return -1;
            if (t->next) sb_put(e, " | ");
        }
    } else if (type) {
        return cerr(c, "bad type keyword");
    } else if (cJSON_GetObjectItemCaseSensitive(s, "properties") ||
               cJSON_GetObjectItemCaseSensitive(s, "additionalProperties") ||
               cJSON_GetObjectItemCaseSensitive(s, "required")) {
        if (conv_object(c, s, e)) return -1;
    } else if (cJSON_GetObjectItemCaseSensitive(s, "items") || cJSON_GetObjectItemCaseSensitive(s, "prefixItems")) {
        if (conv_array(c, s, e)) return -1;
    } else {
        conv_prim(c, NEED_VALUE, "value", e);
    }
    if (nul) sb_put(e, " | \"null\"");
    sb_put(e, ")");
    return 0;
}

/* Merges allOf members that are all objects (after $ref) into one object
 * schema: properties and required concatenated, additionalProperties false
 * when any member says so. Returns a new cJSON or NULL (error set). */
static cJSON *conv_merge_allof(conv *c, const cJSON *all) {
    cJSON *m = cJSON_CreateObject(), *props = cJSON_AddObjectToObject(m, "properties"),
          *req = cJSON_AddArrayToObject(m, "required");
    if (!m || !props || !req || !cJSON_AddStringToObject(m, "type", "object")) goto oom;
    for (const cJSON *s = all->child; s; s = s->next) {
        const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
        if (cJSON_IsString(ref) && !(s = conv_resolve(c, ref->valuestring))) {
            cerr(c, "unresolved $ref '%s'", ref->valuestring);
            goto fail;
        }
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type"), *p = cJSON_GetObjectItemCaseSensitive(s, "properties");
        if (!cJSON_IsObject(s) || (t && !(cJSON_IsString(t) && !strcmp(t->valuestring, "object"))) ||
            (!t && !p)) {
            cerr(c, "allOf with several members that are not all objects");
            goto fail;
        }
        for (const cJSON *q = p ? p->child : NULL; q; q = q->next)
            if (!cJSON_GetObjectItemCaseSensitive(props, q->string) &&
                !cJSON_AddItemToObject(props, q->string, cJSON_Duplicate(q, 1)))
                goto oom;
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(s, "required");
        for (const cJSON *q = cJSON_IsArray(r) ? r->child : NULL; q; q = q->next)
            if (!cJSON_AddItemToArray(req, cJSON_Duplicate(q, 0))) goto oom;
        if (cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(s, "additionalProperties")) &&
            !cJSON_GetObjectItemCaseSensitive(m, "additionalProperties") &&
            !cJSON_AddFalseToObject(m, "additionalProperties"))
            goto oom;
    }
    return m;
oom:
    cerr(c, "out of memory");
fail:
    cJSON_Delete(m);
    return NULL;
}

static int conv_expr(conv *c, const cJSON *s, sbuf *e) {
    if (cJSON_IsTrue(s)) {
        conv_prim(c, NEED_VALUE, "value", e);
        return 0;
    }
    if (!cJSON_IsObject(s)) return cerr(c, cJSON_IsFalse(s) ? "schema false matches nothing" : "schema is not an object");
    const cJSON *j;
    if ((j = cJSON_GetObjectItemCaseSensitive(s, "$ref"))) {
        if (!cJSON_IsString(j)) return cerr(c, "$ref is not a string");
        return conv_ref(c, j->valuestring, e);
    }
    if ((j = cJSON_GetObjectItemCaseSensitive(s, "const"))) {
        sbuf lit = {0};
        sb_json(&lit, j);
        sb_literal(e, lit.s ? lit.s : "", lit.n);
        free(lit.s);
        return 0;
    }
    if ((j = cJSON_GetObjectItemCaseSensitive(s, "enum"))) {
        if (!cJSON_IsArray(j) || !j->child) return cerr(c, "enum needs a non-empty array");
        sb_put(e, "(");
        for (const cJSON *v = j->child; v; v = v->next) {
            sbuf lit = {0};
            sb_json(&lit, v);
            sb_literal(e, lit.s ? lit.s : "", lit.n);
            free(lit.s);
            if (v->next) sb_put(e, " | ");
        }
        sb_put(e, ")");
        return 0;
    }
    if ((j = cJSON_GetObjectItemCaseSensitive(s, "anyOf")) || (j = cJSON_GetObjectItemCaseSensitive(s, "oneOf")))
        return conv_alts(c, j, e);
    if ((j = cJSON_GetObjectItemCaseSensitive(s, "allOf"))) {
        if (!cJSON_IsArray(j) || !j->child) return cerr(c, "allOf needs a non-empty array");
        if (!j->child->next) return conv_expr(c, j->child, e);
        cJSON *m = conv_merge_allof(c, j);
        if (!m) return -1;
        int rc = conv_expr(c, m, e);
        cJSON_Delete(m);
        return rc;
    }
    return conv_types(c, s, e);
}

/* Appends the primitive rules that were used. */
static void conv_prims(conv *c) {
    const char *n = c->name;
    unsigned need = c->need;
    if (need & NEED_VALUE) need |= NEED_OBJECT | NEED_ARRAY | NEED_STRING | NEED_NUMBER;
    if (need & (NEED_OBJECT | NEED_ARRAY)) need |= NEED_VALUE | NEED_STRING;
    if (need & NEED_STRING) need |= NEED_CHAR;
    if (need & NEED_NUMBER) need |= NEED_INTEGER;
    if (need & NEED_INTEGER) need |= NEED_UINT;
    sbuf *o = &c->out;
    if (need & NEED_VALUE)
        sb_printf(o, "%s-value ::= %s-object | %s-array | %s-string | %s-number | \"true\" | \"false\" | \"null\"\n", n,
                  n, n, n, n);
    if (need & NEED_OBJECT)
        sb_printf(o, "%s-object ::= \"{\" (%s-string \": \" %s-value (\", \" %s-string \": \" %s-value)*)? \"}\"\n", n, n,
                  n, n, n);
    if (need & NEED_ARRAY) sb_printf(o, "%s-array ::= \"[\" (%s-value (\", \" %s-value)*)? \"]\"\n", n, n, n);
    if (need & NEED_STRING) sb_printf(o, "%s-string ::= \"\\\"\" %s-char* \"\\\"\"\n", n, n);
    if (need & NEED_CHAR)
        sb_printf(o,
                  "%s-char ::= [^\"\\\\\\x00-\\x1f\\x80-\\xff]"
                  " | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}))"
                  " | [\\xc2-\\xdf] [\\x80-\\xbf] | [\\xe0-\\xef] [\\x80-\\xbf]{2} | [\\xf0-\\xf4] [\\x80-\\xbf]{3}\n",
                  n);
    if (need & NEED_NUMBER)
        sb_printf(o, "%s-number ::= %s-integer (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?\n", n, n);
    if (need & NEED_INTEGER) sb_printf(o, "%s-integer ::= \"-\"? %s-uint\n", n, n);
    if (need & NEED_UINT) sb_printf(o, "%s-uint ::= \"0\" | [1-9] [0-9]{0,15}\n", n);
}

char *grammar_json_schema_to_gbnf(char *gbnf, const char *schema_json, const char *name, char *err,
                                  size_t errlen) {
    conv c = {.name = name, .err = err, .errlen = errlen};
    sbuf body = {0};
    char *res = NULL;
    if (err && errlen) err[0] = 0;
    for (const char *p = name; *p; p++)
        if (!is_name_char(*p)) {
            cerr(&c, "bad rule name '%s'", name);
            return NULL;
        }
    cJSON *root = cJSON_Parse(schema_json);
    if (!root) {
        cerr(&c, "schema is not valid JSON");
        return NULL;
    }
    c.root = root;
    if (gbnf) sb_put(&c.out, gbnf);
    if (conv_expr(&c, root, &body)) goto cleanup;
    conv_rule(&c, name, &body);
    conv_prims(&c);
    if (c.out.oom || body.oom) {
        cerr(&c, "out of memory");
        goto cleanup;
    }
    res = c.out.s;
    c.out.s = NULL;
    free(gbnf);
cleanup:
    for (int i = 0; i < c.n_refs; i++) {
        free(c.ref_ptr[i]);
        free(c.ref_rule[i]);
    }
    free(c.ref_ptr);
    free(c.ref_rule);
    free(c.out.s);
    free(body.s);
    cJSON_Delete(root);
    return res;
}
