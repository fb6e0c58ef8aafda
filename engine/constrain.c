/* constrain.c - a request's grammar applied token by token (constrain.h). */
#include "engine/constrain.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FORCED_BYTES 256

struct constrain {
    grammar *g;
    grammar_state *st;       /* NULL while the answer is free (lazy, before a call opens) */
    const grammar_vocab *gv;
    const tok_vocab *tv;
    int lazy;
    char trigger[32];        /* lazy: the text that opens a call ("{" for a first '{') */
    size_t trigger_len;
    int first_only;          /* lazy: the trigger counts only as the first non-space byte */
    int text_seen;           /* first_only: a non-space byte came before any call */
    char *window;            /* lazy: the answer's last bytes, where a trigger may begin */
    size_t wlen;
    uint8_t *allowed;        /* [n_vocab] mask scratch */
    float *masked;           /* [n_vocab] logits scratch */
    int n_vocab;
    double ms;
    int n_masks;
};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- the grammar text ---- */

typedef struct {
    char *s;
    size_t len, cap;
    int oom;
} text;

static void add(text *t, const char *s, size_t n) {
    if (t->oom) return;
    if (t->len + n + 1 > t->cap) {
        size_t cap = (t->len + n + 1) * 2;
        char *p = realloc(t->s, cap);
        if (!p) {
            t->oom = 1;
            return;
        }
        t->s = p;
        t->cap = cap;
    }
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = 0;
}

static void adds(text *t, const char *s) { add(t, s, strlen(s)); }

/* S as a GBNF literal: "..." with quotes, backslashes and control bytes escaped. */
static void add_literal(text *t, const char *s) {
    adds(t, "\"");
    for (; *s; s++) {
        char esc[8];
        if (*s == '"' || *s == '\\') snprintf(esc, sizeof esc, "\\%c", *s);
        else if (*s == '\n') snprintf(esc, sizeof esc, "\\n");
        else if ((unsigned char)*s < 0x20) snprintf(esc, sizeof esc, "\\x%02x", (unsigned char)*s);
        else snprintf(esc, sizeof esc, "%c", *s);
        adds(t, esc);
    }
    adds(t, "\"");
}

/* Appends converted schema rules named NAME (grammar_json_schema_to_gbnf
 * owns and grows the text). 0, or -1 with err set. */
static int add_schema(text *t, const char *schema, const char *name, char *err, size_t errlen) {
    if (t->oom) return -1;
    char *s = grammar_json_schema_to_gbnf(t->s, schema ? schema : "{}", name, err, errlen);
    if (!s) { /* t->s is still ours */
        if (!err[0]) snprintf(err, errlen, "out of memory");
        return -1;
    }
    t->s = s;
    t->len = t->cap = strlen(s);
    return 0;
}

/* Puts WHERE and ": " before the message in ERR. Returns -1. */
static int err_where(char *err, size_t errlen, const char *where) {
    char why[256];
    snprintf(why, sizeof why, "%s", err);
    snprintf(err, errlen, "%s: %s", where, why);
    return -1;
}

/* call ::= one alternative per tool the choice allows; each tool's input rules. */
static int add_calls(text *t, const chat_toolset *ts, const chat_tool_syntax *syn, char *err, size_t errlen) {
    adds(t, "call ::= ");
    int first = 1;
    for (int i = 0; i < ts->n_tools; i++) {
        if (ts->choice == CHAT_TOOL_CHOICE_TOOL && strcmp(ts->tools[i].name, ts->choice_name)) continue;
        char rule[32];
        snprintf(rule, sizeof rule, "%stool%d", first ? "" : " | ", i);
        adds(t, rule);
        first = 0;
    }
    adds(t, "\n");
    for (int i = 0; i < ts->n_tools; i++) {
        if (ts->choice == CHAT_TOOL_CHOICE_TOOL && strcmp(ts->tools[i].name, ts->choice_name)) continue;
        char rule[32], head[200];
        snprintf(rule, sizeof rule, "tool%d", i);
        snprintf(head, sizeof head, "{\"name\": \"%s\", \"%s\": ", ts->tools[i].name, syn->args_key);
        adds(t, rule);
        adds(t, " ::= ");
        add_literal(t, head);
        adds(t, " tool");
        snprintf(rule, sizeof rule, "%d-input \"}\"\n", i);
        adds(t, rule);
        snprintf(rule, sizeof rule, "tool%d-input", i);
        if (add_schema(t, ts->tools[i].schema_json, rule, err, errlen)) {
            char where[120];
            snprintf(where, sizeof where, "the input_schema of tool '%s'", ts->tools[i].name);
            return err_where(err, errlen, where);
        }
        adds(t, "\n");
    }
    /* a block: the call between its opening and closing texts */
    adds(t, "block ::= ");
    if (*syn->call_open) add_literal(t, syn->call_open);
    adds(t, " call ");
    if (*syn->call_close) add_literal(t, syn->call_close);
    adds(t, "\n");
    return 0;
}

char *constrain_gbnf(const chat_toolset *tools, const char *format_schema, chat_family family, int *lazy, char *err,
                     size_t errlen) {
    const chat_tool_syntax *syn = chat_tool_syntax_of(family);
    int use_tools = tools && tools->n_tools > 0 && tools->choice != CHAT_TOOL_CHOICE_NONE;
    int forced = use_tools && (tools->choice == CHAT_TOOL_CHOICE_ANY || tools->choice == CHAT_TOOL_CHOICE_TOOL);
    /* several calls: separated by a newline (families with an opening text) */
    int many = use_tools && !tools->single_call && *syn->call_open;
    text t = {0};
    err[0] = 0;
    *lazy = 0;
    if (!use_tools && !format_schema) return NULL;
    if (use_tools && add_calls(&t, tools, syn, err, errlen)) goto fail;
    const char *calls = many ? "block (\"\\n\" block)*" : "block";
    if (forced || !format_schema) {
        *lazy = !forced;
        adds(&t, "root ::= ");
        adds(&t, *lazy ? "block" : calls);
        adds(&t, "\n");
    } else {
        adds(&t, "root ::= answer");
        if (use_tools) {
            adds(&t, " | ");
            adds(&t, calls);
        }
        adds(&t, "\n");
        if (add_schema(&t, format_schema, "answer", err, errlen)) {
            err_where(err, errlen, "output_config.format.schema");
            goto fail;
        }
    }
    if (!t.oom) return t.s;
fail:
    if (!err[0]) snprintf(err, errlen, "out of memory");
    free(t.s);
    return NULL;
}

/* ---- matching ---- */

grammar_vocab *constrain_vocab_new(const tok_vocab *tv) {
    int n = tok_n_vocab(tv);
    char **pieces = calloc((size_t)n, sizeof *pieces);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    char buf[FORCED_BYTES * 4];
    int ok = pieces && lens;
    for (int i = 0; ok && i < n; i++) {
        int len = tok_get_type(tv, i) == TOK_TYPE_CONTROL ? 0 : tok_piece(tv, i, buf, (int)sizeof buf);
        if (len <= 0 || len > (int)sizeof buf) continue; /* no bytes, or longer than any grammar needs */
        ok = (pieces[i] = malloc((size_t)len)) != NULL;
        if (ok) {
            memcpy(pieces[i], buf, (size_t)len);
            lens[i] = (size_t)len;
        }
    }
    grammar_vocab *gv = ok ? grammar_vocab_new(n, (const char *const *)pieces, lens) : NULL;
    for (int i = 0; pieces && i < n; i++) free(pieces[i]);
    free(pieces);
    free(lens);
    return gv;
}

constrain *constrain_new(const chat_toolset *tools, const char *format_schema, chat_family family,
                         const grammar_vocab *gv, const tok_vocab *tv, char *err, size_t errlen) {
    int lazy;
    char *gbnf = constrain_gbnf(tools, format_schema, family, &lazy, err, errlen);
    if (!gbnf) return NULL;
    constrain *c = calloc(1, sizeof *c);
    if (!c) goto oom;
    c->gv = gv;
    c->tv = tv;
    c->lazy = lazy;
    c->n_vocab = tok_n_vocab(tv);
    c->allowed = malloc((size_t)c->n_vocab);
    c->masked = malloc((size_t)c->n_vocab * sizeof *c->masked);
    if (!c->allowed || !c->masked) goto oom;
    if (!(c->g = grammar_parse(gbnf, "root", err, errlen))) goto fail;
    if (lazy) {
        size_t n;
        const char *open = chat_tool_syntax_of(family)->call_open;
        while (*open == ' ' || *open == '\n') open++;
        for (n = strlen(open); n && (open[n - 1] == ' ' || open[n - 1] == '\n');) n--;
        c->first_only = n == 0;
        if (c->first_only) open = "{", n = 1;
        if (n >= sizeof c->trigger) n = sizeof c->trigger - 1;
        memcpy(c->trigger, open, n);
        c->trigger_len = n;
        if (!(c->window = malloc(n + FORCED_BYTES + 1024))) goto oom;
    } else if (!(c->st = grammar_state_new(c->g))) {
        goto oom;
    }
    free(gbnf);
    return c;
oom:
    snprintf(err, errlen, "out of memory");
fail:
    free(gbnf);
    constrain_free(c);
    return NULL;
}

void constrain_free(constrain *c) {
    if (!c) return;
    grammar_state_free(c->st);
    grammar_free(c->g);
    free(c->window);
    free(c->allowed);
    free(c->masked);
    free(c);
}

void constrain_stats(const constrain *c, double *ms, int *n_masks) {
    *ms = c ? c->ms : 0;
    *n_masks = c ? c->n_masks : 0;
}

/* 1 when the grammar has ended: nothing but the end may follow. */
static int ended(const constrain *c) { return grammar_state_done(c->st) && !grammar_state_more(c->st); }

static int allowed(const constrain *c, int32_t tok) {
    if (tok_is_eog(c->tv, tok)) return grammar_state_done(c->st);
    return grammar_token_ok(c->st, c->gv, tok);
}

/* Masks LOGITS to the tokens the grammar allows and draws from them. */
static int32_t masked_draw(constrain *c, sampler *s, const float *logits) {
    c->n_masks++;
    if (grammar_token_mask(c->st, c->gv, c->allowed) < 0) return -1;
    int any = 0, done = grammar_state_done(c->st);
    for (int i = 0; i < c->n_vocab; i++) {
        int ok = c->allowed[i] || (done && tok_is_eog(c->tv, i));
        c->masked[i] = ok ? logits[i] : -INFINITY;
        any |= ok;
    }
    /* no token can go on (a vocabulary without the bytes the grammar needs): end */
    return any ? sampler_sample(s, c->masked) : tok_eos(c->tv);
}

int32_t constrain_sample(constrain *c, sampler *s, const float *logits) {
    if (!c || !c->st) return sampler_sample(s, logits);
    double t0 = now_ms();
    int32_t tok = tok_eos(c->tv);
    if (!ended(c)) {
        tok = sampler_sample(s, logits);
        if (!allowed(c, tok)) tok = masked_draw(c, s, logits);
    }
    c->ms += now_ms() - t0;
    return tok;
}

int32_t constrain_picked(constrain *c, sampler *s, int32_t picked) {
    if (c && c->st && ended(c)) return tok_eos(c->tv);
    sampler_took(s);
    if (!c || !c->st) return picked;
    double t0 = now_ms();
    int ok = allowed(c, picked);
    c->ms += now_ms() - t0;
    return ok ? picked : CONSTRAIN_REDRAW;
}

int32_t constrain_redraw(constrain *c, sampler *s, const float *logits) {
    double t0 = now_ms();
    int32_t tok = masked_draw(c, s, logits);
    c->ms += now_ms() - t0;
    return tok;
}

/* Advances the active grammar over N bytes; a lazy one that has ended lets
 * the answer go free again. 0 or -1. */
static int advance(constrain *c, const char *bytes, size_t n) {
    if (grammar_state_accept(c->st, bytes, n)) return -1;
    if (c->lazy && ended(c)) {
        grammar_state_free(c->st);
        c->st = NULL;
        c->wlen = 0;
        c->text_seen = 0;
    }
    return 0;
}

/* Lazy and free: looks for the trigger in the answer's tail and starts the
 * grammar there. 0 or -1 (out of memory). */
static int watch(constrain *c, const char *piece, size_t n) {
    size_t at = 0;
    if (c->first_only) { /* '{' as the first non-space byte */
        for (; at < n && !c->text_seen; at++) {
            if (piece[at] == '{') break;
            if (piece[at] != ' ' && piece[at] != '\n' && piece[at] != '\t') c->text_seen = 1;
        }
        if (c->text_seen || at == n) return 0;
        c->wlen = 0;
    } else {
        if (c->wlen + n > c->trigger_len + FORCED_BYTES + 1024) c->wlen = 0; /* a piece longer than any token */
        memcpy(c->window + c->wlen, piece, n);
        c->wlen += n;
        char *hit = memmem(c->window, c->wlen, c->trigger, c->trigger_len);
        if (!hit) { /* keep what may still begin the trigger */
            size_t keep = c->trigger_len - 1 < c->wlen ? c->trigger_len - 1 : c->wlen;
            memmove(c->window, c->window + c->wlen - keep, keep);
            c->wlen = keep;
            return 0;
        }
        piece = hit;
        n = c->wlen - (size_t)(hit - c->window);
        at = 0;
        c->wlen = 0;
    }
    if (!(c->st = grammar_state_new(c->g))) return -1;
    if (grammar_state_accept(c->st, piece + at, n - at)) { /* the call began in a way the grammar has not: leave it free */
        grammar_state_free(c->st);
        c->st = NULL;
    }
    return 0;
}

int constrain_accept(constrain *c, int32_t tok, const char *piece, size_t n) {
    if (!c) return 0;
    double t0 = now_ms();
    int rc = 0;
    if (c->st) rc = tok_is_eog(c->tv, tok) ? 0 : advance(c, piece, n);
    else if (c->lazy) rc = watch(c, piece, n);
    c->ms += now_ms() - t0;
    return rc;
}

int constrain_forced(constrain *c, int32_t *out, int cap) {
    if (!c || !c->st || cap < 1) return 0;
    double t0 = now_ms();
    char bytes[FORCED_BYTES], piece[FORCED_BYTES];
    size_t n = grammar_state_forced(c->st, bytes, sizeof bytes);
    int k = 0;
    if (n) {
        int total = tok_encode_piece(c->tv, bytes, n, out, cap);
        if (total > cap) total = cap;
        for (; k < total && c->st; k++) { /* each token's bytes must be what the grammar forces */
            int len = tok_piece(c->tv, out[k], piece, (int)sizeof piece);
            if (len <= 0 || len > (int)sizeof piece || !grammar_token_ok(c->st, c->gv, out[k]) ||
                advance(c, piece, (size_t)len))
                break;
        }
    }
    c->ms += now_ms() - t0;
    return k;
}
