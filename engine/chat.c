/* chat.c - the chat template families, rendered by hand. */
#include "chat.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *family_names[CHAT_FAMILY_COUNT] = {"plain", "llama2", "llama3", "chatml", "zephyr"};

chat_family chat_family_detect(const char *t) {
    if (!t) return CHAT_FAMILY_PLAIN;
    if (strstr(t, "<|start_header_id|>")) return CHAT_FAMILY_LLAMA3;
    if (strstr(t, "<|im_start|>")) return CHAT_FAMILY_CHATML;
    if (strstr(t, "<|user|>")) return CHAT_FAMILY_ZEPHYR;
    if (strstr(t, "[INST]")) return CHAT_FAMILY_LLAMA2;
    return CHAT_FAMILY_PLAIN;
}

const char *chat_family_name(chat_family f) { return f >= 0 && f < CHAT_FAMILY_COUNT ? family_names[f] : "plain"; }

int chat_family_parse(const char *name) {
    for (int f = 0; f < CHAT_FAMILY_COUNT; f++)
        if (!strcmp(name, family_names[f])) return f;
    return -1;
}

typedef struct {
    char *s;
    size_t len, cap;
    int failed;
} sbuf;

__attribute__((format(printf, 2, 3))) static void put(sbuf *b, const char *fmt, ...) {
    if (b->failed) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || b->len + (size_t)n + 1 > b->cap) {
        size_t cap = (b->len + (size_t)(n > 0 ? n : 0) + 1) * 2;
        char *p = n < 0 ? NULL : realloc(b->s, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static const char *role_name(chat_role r) {
    return r == CHAT_ROLE_ASSISTANT ? "assistant" : r == CHAT_ROLE_SYSTEM ? "system" : "user";
}

/* llama2: [INST] <<SYS>>\nsys\n<</SYS>>\n\nuser [/INST] answer </s><s>[INST] user [/INST] */
static void render_llama2(sbuf *b, const char *bos, const char *eos, const char *sys, const chat_message *m, int n) {
    int first_user = 1;
    for (int i = 0; i < n; i++) {
        int last = i == n - 1;
        if (m[i].role == CHAT_ROLE_ASSISTANT) {
            put(b, " %s", m[i].text);
            if (!last) put(b, " %s%s", eos, bos);
            continue;
        }
        if (first_user && sys && *sys) put(b, "[INST] <<SYS>>\n%s\n<</SYS>>\n\n%s [/INST]", sys, m[i].text);
        else put(b, "[INST] %s [/INST]", m[i].text);
        first_user = 0;
    }
}

/* The header-based families: llama3, chatml, zephyr. */
static void render_headers(sbuf *b, chat_family f, const char *eos, const char *sys, const chat_message *m, int n) {
    if (sys && *sys) {
        if (f == CHAT_FAMILY_LLAMA3) put(b, "<|start_header_id|>system<|end_header_id|>\n\n%s<|eot_id|>", sys);
        else if (f == CHAT_FAMILY_CHATML) put(b, "<|im_start|>system\n%s<|im_end|>\n", sys);
        else put(b, "<|system|>\n%s%s\n", sys, eos);
    }
    for (int i = 0; i < n; i++) {
        int open = i == n - 1 && m[i].role == CHAT_ROLE_ASSISTANT; /* prefill: left open */
        const char *r = role_name(m[i].role);
        if (f == CHAT_FAMILY_LLAMA3) put(b, "<|start_header_id|>%s<|end_header_id|>\n\n%s%s", r, m[i].text, open ? "" : "<|eot_id|>");
        else if (f == CHAT_FAMILY_CHATML) put(b, "<|im_start|>%s\n%s%s", r, m[i].text, open ? "" : "<|im_end|>\n");
        else put(b, "<|%s|>\n%s%s%s", r, m[i].text, open ? "" : eos, open ? "" : "\n");
    }
    if (n && m[n - 1].role == CHAT_ROLE_ASSISTANT) return;
    if (f == CHAT_FAMILY_LLAMA3) put(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    else if (f == CHAT_FAMILY_CHATML) put(b, "<|im_start|>assistant\n");
    else put(b, "<|assistant|>\n");
}

/* plain: "sys\n\nUser: msg\nAssistant: answer\nUser: msg\nAssistant:" */
static void render_plain(sbuf *b, const char *sys, const chat_message *m, int n) {
    if (sys && *sys) put(b, "%s\n\n", sys);
    for (int i = 0; i < n; i++) {
        int last = i == n - 1;
        if (m[i].role == CHAT_ROLE_ASSISTANT) put(b, "Assistant: %s%s", m[i].text, last ? "" : "\n");
        else put(b, "User: %s\n", m[i].text);
    }
    if (!n || m[n - 1].role != CHAT_ROLE_ASSISTANT) put(b, "Assistant:");
}

char *chat_render(chat_family f, const char *bos_text, const char *eos_text, const char *system,
                  const chat_message *msgs, int n) {
    sbuf b = {0};
    put(&b, "%s", ""); /* an empty conversation still yields a string */
    const char *bos = bos_text ? bos_text : "", *eos = eos_text ? eos_text : "";
    switch (f) {
    case CHAT_FAMILY_LLAMA2: render_llama2(&b, bos, eos, system, msgs, n); break;
    case CHAT_FAMILY_LLAMA3:
    case CHAT_FAMILY_CHATML:
    case CHAT_FAMILY_ZEPHYR: render_headers(&b, f, eos, system, msgs, n); break;
    default: render_plain(&b, system, msgs, n); break;
    }
    if (b.failed) {
        free(b.s);
        return NULL;
    }
    return b.s;
}
