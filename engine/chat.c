/* chat.c - the chat template families, rendered by hand (see chat.h).
 *
 * What each family produces, S = the system prompt, U = a user message,
 * A = an assistant message, BOS/EOS = the texts passed in:
 *
 *  llama3  [<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>]
 *          <|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>
 *          <|start_header_id|>assistant<|end_header_id|>\n\nA<|eot_id|> ...
 *          <|start_header_id|>assistant<|end_header_id|>\n\n
 *          Every text is trimmed of leading and trailing whitespace, as the
 *          template's `| trim` does. We do NOT reproduce the "Cutting
 *          Knowledge Date / Today Date" preamble that the Llama 3.1/3.2
 *          templates put in the system turn (it would make the prompt depend
 *          on the date), nor their empty system turn when there is no system
 *          prompt: this is the plain Llama 3 (8B) template's form.
 *  chatml  [<|im_start|>system\nS<|im_end|>\n]<|im_start|>user\nU<|im_end|>\n
 *          <|im_start|>assistant\nA<|im_end|>\n ... <|im_start|>assistant\n
 *          (Qwen's default "You are a helpful assistant." system turn is not
 *          added: that belongs to one model's template, not to ChatML.)
 *  zephyr  [<|system|>\nS EOS\n]<|user|>\nU EOS\n<|assistant|>\nA EOS\n ...
 *          <|assistant|>\n   (no spaces around EOS: "...U</s>\n")
 *  llama2  [INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST] A EOS BOS[INST] U [/INST]
 *          The system prompt is folded into the next user turn; each user
 *          turn's content (system block included) and each answer is
 *          stripped, as the template's .strip() does. The first BOS is the
 *          tokenizer's, so it is not rendered.
 *  plain   [S\n\n]User: U\nAssistant: A\nUser: U\nAssistant:
 *          for models without a template; the model continues after
 *          "Assistant:" (its answer normally starts with a space).
 *
 * Assistant prefill: when the last message is the assistant's, its text is
 * rendered without the end of its turn and no new turn is opened.
 * A system message inside the list (rather than the system argument) is used
 * as the system prompt when it comes first and no system argument is given;
 * elsewhere it becomes a system turn (llama3, chatml, zephyr), the system
 * block of the next user turn (llama2), or a "System: ..." line (plain).
 */
#include "engine/chat.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *const family_names[CHAT_FAMILY_COUNT] = {"plain", "llama2", "llama3", "chatml", "zephyr"};

/* Returns the family whose marker T contains (checked in this order), else PLAIN. */
chat_family chat_family_detect(const char *t) {
    if (!t) return CHAT_FAMILY_PLAIN;
    if (strstr(t, "<|start_header_id|>")) return CHAT_FAMILY_LLAMA3;
    if (strstr(t, "<|im_start|>")) return CHAT_FAMILY_CHATML;
    if (strstr(t, "<|user|>")) return CHAT_FAMILY_ZEPHYR;
    if (strstr(t, "[INST]")) return CHAT_FAMILY_LLAMA2;
    return CHAT_FAMILY_PLAIN;
}

/* Returns a static name; out-of-range values are "plain". */
const char *chat_family_name(chat_family f) {
    return f >= 0 && f < CHAT_FAMILY_COUNT ? family_names[f] : family_names[CHAT_FAMILY_PLAIN];
}

/* Returns the family called NAME, or -1 (also for NULL). */
int chat_family_parse(const char *name) {
    for (int f = 0; name && f < CHAT_FAMILY_COUNT; f++)
        if (!strcmp(name, family_names[f])) return f;
    return -1;
}

/* A growing NUL-terminated string; it owns s. failed is set (and sticks)
 * when an allocation fails. */
typedef struct {
    char *s;
    size_t len, cap;
    int failed;
} chat_buf;

/* Appends the N bytes at P to B. */
static void put_n(chat_buf *b, const char *p, size_t n) {
    if (b->failed) return;
    if (n >= SIZE_MAX / 2 - b->len) {
        b->failed = 1;
        return;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *q = realloc(b->s, cap);
        if (!q) {
            b->failed = 1;
            return;
        }
        b->s = q;
        b->cap = cap;
    }
    memcpy(b->s + b->len, p, n);
    b->len += n;
    b->s[b->len] = 0;
}

/* Appends the NUL-terminated S (NULL counts as "") to B. */
static void put(chat_buf *b, const char *s) { put_n(b, s ? s : "", s ? strlen(s) : 0); }

/* Returns 1 for the ASCII whitespace that Python's str.strip() removes. */
static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* Appends S (NULL = "") to B without its leading and trailing whitespace. */
static void put_trimmed(chat_buf *b, const char *s) {
    if (!s) return;
    size_t n = strlen(s);
    while (n && is_space(s[n - 1])) n--;
    while (n && is_space(*s)) {
        s++;
        n--;
    }
    put_n(b, s, n);
}

/* Returns the role name used in turn headers. */
static const char *role_name(chat_role r) {
    return r == CHAT_ROLE_ASSISTANT ? "assistant" : r == CHAT_ROLE_SYSTEM ? "system" : "user";
}

/* llama3, chatml and zephyr: one header, the text and an end per turn.
 * OPEN leaves the turn's end off (assistant prefill). */
static void turn_headers(chat_buf *b, chat_family f, const char *eos, chat_role role, const char *text, int open) {
    if (f == CHAT_FAMILY_LLAMA3) {
        put(b, "<|start_header_id|>");
        put(b, role_name(role));
        put(b, "<|end_header_id|>\n\n");
        put_trimmed(b, text);
        if (!open) put(b, "<|eot_id|>");
    } else if (f == CHAT_FAMILY_CHATML) {
        put(b, "<|im_start|>");
        put(b, role_name(role));
        put(b, "\n");
        put(b, text);
        if (!open) put(b, "<|im_end|>\n");
    } else {
        put(b, "<|");
        put(b, role_name(role));
        put(b, "|>\n");
        put(b, text);
        if (!open) {
            put(b, eos);
            put(b, "\n");
        }
    }
}

/* Renders the header-based families (llama3, chatml, zephyr) into B. */
static void render_headers(chat_buf *b, chat_family f, const char *eos, const char *sys, const chat_message *m, int n) {
    if (sys && *sys) turn_headers(b, f, eos, CHAT_ROLE_SYSTEM, sys, 0);
    for (int i = 0; i < n; i++)
        turn_headers(b, f, eos, m[i].role, m[i].text, i == n - 1 && m[i].role == CHAT_ROLE_ASSISTANT);
    if (n && m[n - 1].role == CHAT_ROLE_ASSISTANT) return;
    turn_headers(b, f, eos, CHAT_ROLE_ASSISTANT, "", 1);
}

/* Renders llama2 into B: SYS is folded into the next user turn, each turn's
 * content stripped, BOS before every [INST] but the first thing rendered. */
static void render_llama2(chat_buf *b, const char *bos, const char *eos, const char *sys, const chat_message *m,
                          int n) {
    chat_buf pending = {0}; /* system text waiting for the next user turn */
    chat_buf content = {0};
    if (sys && *sys) put(&pending, sys);
    for (int i = 0; i < n; i++) {
        if (m[i].role == CHAT_ROLE_SYSTEM) {
            if (pending.len) put(&pending, "\n\n");
            put(&pending, m[i].text);
            continue;
        }
        if (m[i].role == CHAT_ROLE_ASSISTANT) {
            put(b, " ");
            put_trimmed(b, m[i].text);
            if (i < n - 1) {
                put(b, " ");
                put(b, eos);
            }
            continue;
        }
        content.len = 0;
        if (pending.len) {
            put(&content, "<<SYS>>\n");
            put_n(&content, pending.s, pending.len);
            put(&content, "\n<</SYS>>\n\n");
            pending.len = 0;
        }
        put(&content, m[i].text);
        if (b->len) put(b, bos);
        put(b, "[INST] ");
        put_trimmed(b, content.failed ? NULL : content.s);
        put(b, " [/INST]");
        if (content.failed || pending.failed) b->failed = 1;
    }
    if (pending.failed) b->failed = 1;
    free(pending.s);
    free(content.s);
}

/* Renders the plain "User:/Assistant:" form into B. */
static void render_plain(chat_buf *b, const char *sys, const chat_message *m, int n) {
    if (sys && *sys) {
        put(b, sys);
        put(b, "\n\n");
    }
    for (int i = 0; i < n; i++) {
        int last = i == n - 1;
        if (m[i].role == CHAT_ROLE_ASSISTANT) {
            put(b, "Assistant: ");
            put(b, m[i].text);
            if (!last) put(b, "\n");
        } else {
            put(b, m[i].role == CHAT_ROLE_SYSTEM ? "System: " : "User: ");
            put(b, m[i].text);
            put(b, "\n");
        }
    }
    if (!n || m[n - 1].role != CHAT_ROLE_ASSISTANT) put(b, "Assistant:");
}

/* Returns the rendered prompt (malloc'd, the caller frees it), or NULL when
 * out of memory or for a negative N / NULL MSGS with N > 0. */
char *chat_render(chat_family f, const char *bos_text, const char *eos_text, const char *system,
                  const chat_message *msgs, int n) {
    chat_buf b = {0};
    const char *bos = bos_text ? bos_text : "", *eos = eos_text ? eos_text : "";
    if (n < 0 || (n > 0 && !msgs)) return NULL;
    /* A leading system message stands in for a missing system argument. */
    if ((!system || !*system) && n > 0 && msgs[0].role == CHAT_ROLE_SYSTEM) {
        system = msgs[0].text;
        msgs++;
        n--;
    }
    put(&b, ""); /* an empty conversation still yields a string */
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
