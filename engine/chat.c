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
 *  qwen3   chatml, and when the request does not enable thinking the opened
 *          assistant turn gets an empty thought, "<|im_start|>assistant\n
 *          <think>\n\n</think>\n\n", as Qwen3's template does with
 *          enable_thinking=false (an assistant prefill too: the template
 *          puts an empty thought before the last assistant message); with
 *          thinking on, the model opens its own <think> block
 *          (engine/answer.h splits it off). Earlier thoughts
 *          are not rendered (the server drops thinking blocks), as the
 *          template strips reasoning from past turns.
 *  zephyr  [<|system|>\nS EOS\n]<|user|>\nU EOS\n<|assistant|>\nA EOS\n ...
 *          <|assistant|>\n   (no spaces around EOS: "...U</s>\n")
 *  llama2  [INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST] A EOS BOS[INST] U [/INST]
 *          The system prompt is folded into the next user turn; each user
 *          turn's content (system block included) and each answer is
 *          stripped, as the template's .strip() does. The first BOS is the
 *          tokenizer's, so it is not rendered.
 *  phi3    zephyr's form with <|end|> ending each turn (Phi-3 and Phi-3.5
 *          mini: [<|system|>\nS<|end|>\n]<|user|>\nU<|end|>\n<|assistant|>\n);
 *  phi4    [<|system|>S<|end|>]<|user|>U<|end|><|assistant|>A<|end|> ...
 *          <|assistant|>   (Phi-4-mini: phi3 without the newlines)
 *  gemma   <start_of_turn>user\n[S\n\n]U<end_of_turn>\n<start_of_turn>model\nA
 *          <end_of_turn>\n ... <start_of_turn>model\n
 *          (Gemma 3's template: no system turn, the system prompt and a
 *          blank line open the first turn's text; each message's text is
 *          trimmed, the system prompt is not; a system message later in the
 *          list opens the next turn's text the same way; the first BOS is
 *          the tokenizer's, so it is not rendered.)
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
 *
 * Tools (chat_tool_syntax_of() holds every string below). A message's
 * content is its parts in order: consecutive text parts joined by a blank
 * line, anything else on a line of its own ("\n" between). A call's INPUT and
 * the tool list are printed as Python's json.dumps does (the templates'
 * tojson): ", " and ": " separators, or indent 4 for Llama's tool list. A
 * tool is {"type": "function", "function": {"name", "description"?,
 * "parameters": input_schema}} (the templates' OpenAI shape). The tools are
 * rendered unless there are none or tool_choice is none; tool_choice any /
 * tool / disable_parallel_tool_use add one sentence after the list (NOTE:
 * "You must call at least one function." / "You must call the function X." /
 * "Call at most one function."), which the templates do not have.
 *
 *  llama3  Llama 3.1's custom-tool convention with the tools in the system
 *          turn (its tools_in_user_message=false form, which keeps the
 *          prompt's prefix the same across turns), without the date lines:
 *          system turn = "Environment: ipython\n" + "You have access to the
 *          following functions. To call a function, please respond with JSON
 *          for a function call.Respond in the format {"name": function name,
 *          "parameters": dictionary of argument name and its value}.Do not use
 *          variables.\n\n" + each tool (indent 4) + "\n\n" + [NOTE\n\n] + S.
 *          A call: {"name": "get_weather", "parameters": {"city": "Paris"}}
 *          in the assistant turn; each result is its own
 *          <|start_header_id|>ipython<|end_header_id|>\n\nTEXT<|eot_id|>
 *          turn (not trimmed, as the template has it).
 *  chatml, qwen3  Qwen2.5's Hermes convention: system turn = [S\n\n] + "# Tools\n\n
 *          You may call one or more functions to assist with the user query.
 *          \n\nYou are provided with function signatures within <tools></tools>
 *          XML tags:\n<tools>" + "\n" + each tool (one line) + "\n</tools>\n\n
 *          For each function call, return a json object with function name
 *          and arguments within <tool_call></tool_call> XML tags:\n<tool_call>
 *          \n{"name": <function-name>, "arguments": <args-json-object>}\n
 *          </tool_call>" + [\n\nNOTE]. A call:
 *          <tool_call>\n{"name": "get_weather", "arguments": {...}}\n</tool_call>,
 *          a result: <tool_response>\nTEXT\n</tool_response>, inside the
 *          user turn, which gives exactly Qwen2.5's text (its default "You are
 *          Qwen..." system text is not added when S is empty).
 *  zephyr, phi3, phi4, llama2, gemma, plain: no tool convention of their own, so the Hermes
 *          text above is used: the tool block joins the system prompt, calls
 *          and results are the same tags inside the turns' text.
 * A result with is_error is "Error: " + TEXT.
 */
#include "engine/chat.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const family_names[CHAT_FAMILY_COUNT] = {"plain",  "llama2", "llama3", "chatml",
                                                            "zephyr", "qwen3",  "gemma", "phi3",
                                                            "phi4"};

/* Returns the family whose marker T contains (checked in this order), else PLAIN. */
chat_family chat_family_detect(const char *t) {
    if (!t) return CHAT_FAMILY_PLAIN;
    if (strstr(t, "<|start_header_id|>")) return CHAT_FAMILY_LLAMA3;
    if (strstr(t, "<|im_start|>")) return strstr(t, "<think>") ? CHAT_FAMILY_QWEN3 : CHAT_FAMILY_CHATML;
    if (strstr(t, "<start_of_turn>")) return CHAT_FAMILY_GEMMA;
    if (strstr(t, "<|user|>")) return strstr(t, "<|end|>") ? CHAT_FAMILY_PHI3 : CHAT_FAMILY_ZEPHYR;
    if (strstr(t, "<|end|>") && strstr(t, "<|assistant|>")) return CHAT_FAMILY_PHI4; /* '<|' + role + '|>' */
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

static const chat_tool_syntax llama3_tools = {
    .call_open = "",
    .call_close = "",
    .args_key = "parameters",
    .result_open = "",
    .result_close = "",
    .result_turn = "ipython",
    .tools_indent = 4,
    .tools_first = 1,
    .tools_intro = "Environment: ipython\n"
                   "You have access to the following functions. To call a function, please respond with JSON for a "
                   "function call.Respond in the format {\"name\": function name, \"parameters\": dictionary of "
                   "argument name and its value}.Do not use variables.\n\n",
    .tool_before = "",
    .tool_after = "\n\n",
    .tools_outro = "",
    .note_before = "",
    .note_after = "\n\n",
};

static const chat_tool_syntax hermes_tools = {
    .call_open = "<tool_call>\n",
    .call_close = "\n</tool_call>",
    .args_key = "arguments",
    .result_open = "<tool_response>\n",
    .result_close = "\n</tool_response>",
    .result_turn = NULL,
    .tools_indent = 0,
    .tools_first = 0,
    .tools_intro = "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                   "You are provided with function signatures within <tools></tools> XML tags:\n<tools>",
    .tool_before = "\n",
    .tool_after = "",
    .tools_outro = "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
                   "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
                   "\"arguments\": <args-json-object>}\n</tool_call>",
    .note_before = "\n\n",
    .note_after = "",
};

/* Returns the static tool syntax of family F. */
const chat_tool_syntax *chat_tool_syntax_of(chat_family f) {
    return f == CHAT_FAMILY_LLAMA3 ? &llama3_tools : &hermes_tools;
}

/* Appends S (NULL = "") to B as a JSON string literal, escaped as Python's
 * json.dumps(ensure_ascii=False) does. */
static void put_json_string(chat_buf *b, const char *s) {
    put(b, "\"");
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        char esc[8];
        switch (*p) {
        case '"': put(b, "\\\""); break;
        case '\\': put(b, "\\\\"); break;
        case '\n': put(b, "\\n"); break;
        case '\r': put(b, "\\r"); break;
        case '\t': put(b, "\\t"); break;
        case '\b': put(b, "\\b"); break;
        case '\f': put(b, "\\f"); break;
        default:
            if (*p < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", *p);
                put(b, esc);
            } else {
                put_n(b, (const char *)p, 1);
            }
        }
    }
    put(b, "\"");
}

/* Appends a newline and DEPTH * INDENT spaces to B. */
static void put_newline(chat_buf *b, int indent, int depth) {
    put(b, "\n");
    for (long i = 0; i < (long)indent * depth; i++) put(b, " ");
}

/* Appends the JSON text J (NULL = "{}") to B re-spaced as Python's
 * json.dumps prints it: ", " and ": " when INDENT is 0, else one member per
 * line indented by INDENT per level ("," and ": "); empty containers stay
 * "{}" / "[]". Strings are copied as they are; J need not be valid (the
 * output is then as garbled as the input, never out of bounds). */
static void put_json(chat_buf *b, const char *j, int indent) {
    int depth = 0;
    if (!j) j = "{}";
    for (const char *p = j; *p; p++) {
        if (*p == '"') {
            const char *q = p + 1;
            while (*q && *q != '"') q += q[0] == '\\' && q[1] ? 2 : 1;
            put_n(b, p, (size_t)(q - p) + (*q ? 1 : 0));
            if (!*q) return;
            p = q;
        } else if (is_space(*p)) {
            continue;
        } else if (*p == '{' || *p == '[') {
            const char *q = p + 1;
            while (is_space(*q)) q++;
            put_n(b, p, 1);
            if ((*p == '{' && *q == '}') || (*p == '[' && *q == ']')) {
                put_n(b, q, 1);
                p = q;
                continue;
            }
            depth++;
            if (indent) put_newline(b, indent, depth);
        } else if (*p == '}' || *p == ']') {
            if (depth) depth--;
            if (indent) put_newline(b, indent, depth);
            put_n(b, p, 1);
        } else if (*p == ',') {
            put(b, ",");
            if (indent) put_newline(b, indent, depth);
            else put(b, " ");
        } else if (*p == ':') {
            put(b, ": ");
        } else {
            put_n(b, p, 1);
        }
    }
}

/* Appends tool T to B in the templates' OpenAI shape, with INDENT. */
static void put_tool(chat_buf *b, const chat_tool *t, int indent) {
    chat_buf j = {0};
    put(&j, "{\"type\":\"function\",\"function\":{\"name\":");
    put_json_string(&j, t->name);
    if (t->description) {
        put(&j, ",\"description\":");
        put_json_string(&j, t->description);
    }
    put(&j, ",\"parameters\":");
    put(&j, t->schema_json ? t->schema_json : "{}");
    put(&j, "}}");
    if (j.failed) b->failed = 1;
    else put_json(b, j.s, indent);
    free(j.s);
}

/* Returns 1 when TOOLS are to be rendered (some, and tool_choice not none). */
static int tools_on(const chat_toolset *tools) {
    return tools && tools->n_tools > 0 && tools->tools && tools->choice != CHAT_TOOL_CHOICE_NONE;
}

/* Appends the tool block of TOOLS in syntax SYN to B: intro, the tools, outro
 * and the tool_choice sentence when there is one. */
static void put_tool_block(chat_buf *b, const chat_tool_syntax *syn, const chat_toolset *tools) {
    put(b, syn->tools_intro);
    for (int i = 0; i < tools->n_tools; i++) {
        put(b, syn->tool_before);
        put_tool(b, &tools->tools[i], syn->tools_indent);
        put(b, syn->tool_after);
    }
    put(b, syn->tools_outro);
    if (tools->choice == CHAT_TOOL_CHOICE_AUTO && !tools->single_call) return;
    put(b, syn->note_before);
    if (tools->choice == CHAT_TOOL_CHOICE_ANY) put(b, "You must call at least one function.");
    if (tools->choice == CHAT_TOOL_CHOICE_TOOL) {
        put(b, "You must call the function ");
        put(b, tools->choice_name);
        put(b, ".");
    }
    if (tools->single_call) put(b, tools->choice == CHAT_TOOL_CHOICE_AUTO ? "Call at most one function."
                                                                          : " Call at most one function.");
    put(b, syn->note_after);
}

/* Appends to B the system content of family F: SYS (trimmed for llama3)
 * and the tool block. Returns 1 when there is a system turn to render (SYS
 * non-empty or tools rendered), else 0. */
static int put_system(chat_buf *b, chat_family f, const char *sys, const chat_toolset *tools) {
    const chat_tool_syntax *syn = chat_tool_syntax_of(f);
    int has_sys = sys && *sys, on = tools_on(tools);
    if (on && syn->tools_first) put_tool_block(b, syn, tools);
    if (f == CHAT_FAMILY_LLAMA3) put_trimmed(b, sys);
    else put(b, sys);
    if (on && !syn->tools_first) {
        if (has_sys) put(b, "\n\n");
        put_tool_block(b, syn, tools);
    }
    return has_sys || on;
}

/* Appends part P to B in syntax SYN. */
static void put_part(chat_buf *b, const chat_tool_syntax *syn, const chat_part *p) {
    if (p->type == CHAT_PART_TOOL_CALL) {
        put(b, syn->call_open);
        put(b, "{\"name\": ");
        put_json_string(b, p->name);
        put(b, ", \"");
        put(b, syn->args_key);
        put(b, "\": ");
        put_json(b, p->input_json, 0);
        put(b, "}");
        put(b, syn->call_close);
    } else if (p->type == CHAT_PART_TOOL_RESULT) {
        put(b, syn->result_open);
        if (p->is_error) put(b, "Error: ");
        put(b, p->text);
        put(b, syn->result_close);
    } else {
        put(b, p->text);
    }
}

/* One turn as the families render it: a role, the header's role name when
 * it is not the role's own ("ipython"), and the content (owned). */
typedef struct {
    chat_role role;
    const char *header;
    char *text;
} turn;

/* Appends the buffer C as turn (ROLE, HEADER) to T[*N] (taking C's string)
 * and resets C. Returns 0, or -1 when C's allocation had failed. */
static int push_turn(turn *t, int *n, chat_role role, const char *header, chat_buf *c) {
    if (c->failed) return -1;
    t[*n] = (turn){role, header, c->s};
    (*n)++;
    *c = (chat_buf){0};
    return 0;
}

/* Appends to T (*N turns so far) the turns of message M in syntax SYN: its
 * content as one turn, except that families with result turns get one turn
 * per result (and a turn per run of other parts between them). T must have
 * room for max(1, n_parts) more. Returns 0 or -1 (out of memory). */
static int add_turns(const chat_message *m, const chat_tool_syntax *syn, turn *t, int *n) {
    chat_buf c = {0};
    int any = 0, prev = -1;
    if (m->n_parts <= 0 || !m->parts) {
        put(&c, m->text);
        return push_turn(t, n, m->role, NULL, &c);
    }
    for (int i = 0; i < m->n_parts; i++) {
        const chat_part *p = &m->parts[i];
        if (p->type == CHAT_PART_TOOL_RESULT && syn->result_turn) {
            chat_buf r = {0};
            if (any && push_turn(t, n, m->role, NULL, &c)) goto fail;
            any = 0;
            prev = -1;
            put(&r, "");
            put_part(&r, syn, p);
            if (push_turn(t, n, CHAT_ROLE_USER, syn->result_turn, &r)) {
                free(r.s);
                goto fail;
            }
            continue;
        }
        if (any) put(&c, prev == CHAT_PART_TEXT && p->type == CHAT_PART_TEXT ? "\n\n" : "\n");
        put(&c, "");
        put_part(&c, syn, p);
        prev = (int)p->type;
        any = 1;
    }
    if (any && push_turn(t, n, m->role, NULL, &c)) goto fail;
    return 0;
fail:
    free(c.s);
    return -1;
}

/* llama3, chatml, qwen3 and zephyr: one header, the text and an end per
 * turn. ROLE is the header's role name; TRIM trims the text (llama3's |
 * trim); OPEN leaves the turn's end off (the answer, or an assistant
 * prefill) and then LEAD (or NULL) goes before the text. */
static void turn_headers(chat_buf *b, chat_family f, const char *eos, const char *role, const char *text, int trim,
                         int open, const char *lead) {
    if (f == CHAT_FAMILY_LLAMA3) {
        put(b, "<|start_header_id|>");
        put(b, role);
        put(b, "<|end_header_id|>\n\n");
        if (open) put(b, lead);
        if (trim) put_trimmed(b, text);
        else put(b, text);
        if (!open) put(b, "<|eot_id|>");
    } else if (f == CHAT_FAMILY_CHATML || f == CHAT_FAMILY_QWEN3) {
        put(b, "<|im_start|>");
        put(b, role);
        put(b, "\n");
        if (open) put(b, lead);
        put(b, text);
        if (!open) put(b, "<|im_end|>\n");
    } else { /* zephyr, phi3 (EOS: <|end|>), phi4 (the same without the newlines) */
        int nl = f != CHAT_FAMILY_PHI4;
        put(b, "<|");
        put(b, role);
        put(b, nl ? "|>\n" : "|>");
        if (open) put(b, lead);
        put(b, text);
        if (!open) {
            put(b, eos);
            if (nl) put(b, "\n");
        }
    }
}

/* Renders the header-based families (llama3, chatml, qwen3, zephyr, phi3, phi4) into B;
 * SYS is the system content (already trimmed for llama3), or NULL for no
 * system turn; THINKING as chat_render's. */
static void render_headers(chat_buf *b, chat_family f, const char *eos, const char *sys, const turn *m, int n,
                           int thinking) {
    /* qwen3 without thinking: the answer (or the prefill) starts after an empty thought */
    const char *lead = f == CHAT_FAMILY_QWEN3 && !thinking ? "<think>\n\n</think>\n\n" : NULL;
    if (sys) turn_headers(b, f, eos, "system", sys, 0, 0, NULL);
    for (int i = 0; i < n; i++)
        turn_headers(b, f, eos, m[i].header ? m[i].header : role_name(m[i].role), m[i].text, !m[i].header,
                     i == n - 1 && m[i].role == CHAT_ROLE_ASSISTANT, lead);
    if (n && m[n - 1].role == CHAT_ROLE_ASSISTANT) return;
    turn_headers(b, f, eos, "assistant", "", 0, 1, lead);
}

/* Renders llama2 into B: SYS is folded into the next user turn, each turn's
 * content stripped, BOS before every [INST] but the first thing rendered. */
static void render_llama2(chat_buf *b, const char *bos, const char *eos, const char *sys, const turn *m, int n) {
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

/* Renders gemma into B: the system text (SYS, then any system message)
 * opens the next turn's text after a blank line; "model" is the assistant's
 * role name. */
static void render_gemma(chat_buf *b, const char *sys, const turn *m, int n) {
    chat_buf pending = {0}; /* system text waiting for the next turn */
    if (sys && *sys) put(&pending, sys);
    for (int i = 0; i < n; i++) {
        if (m[i].role == CHAT_ROLE_SYSTEM) {
            if (pending.len) put(&pending, "\n\n");
            put(&pending, m[i].text);
            continue;
        }
        int assistant = m[i].role == CHAT_ROLE_ASSISTANT;
        put(b, assistant ? "<start_of_turn>model\n" : "<start_of_turn>user\n");
        if (pending.len) {
            put_n(b, pending.s, pending.len);
            put(b, "\n\n");
            pending.len = 0;
        }
        put_trimmed(b, m[i].text);
        if (!assistant || i < n - 1) put(b, "<end_of_turn>\n"); /* else: an assistant prefill */
    }
    if (pending.failed) b->failed = 1;
    free(pending.s);
    if (!n || m[n - 1].role != CHAT_ROLE_ASSISTANT) put(b, "<start_of_turn>model\n");
}

/* Renders the plain "User:/Assistant:" form into B. */
static void render_plain(chat_buf *b, const char *sys, const turn *m, int n) {
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
                  const chat_toolset *tools, const chat_message *msgs, int n, int thinking) {
    chat_buf b = {0}, sys = {0};
    const char *bos = bos_text ? bos_text : "", *eos = eos_text ? eos_text : "";
    const chat_tool_syntax *syn = chat_tool_syntax_of(f);
    turn *t = NULL;
    int n_t = 0, ok = 0;
    size_t cap = 1;
    if (n < 0 || (n > 0 && !msgs)) return NULL;
    for (int i = 0; i < n; i++) cap += msgs[i].n_parts > 1 && msgs[i].parts ? (size_t)msgs[i].n_parts : 1;
    if (!(t = calloc(cap, sizeof *t))) return NULL;
    for (int i = 0; i < n; i++)
        if (add_turns(&msgs[i], syn, t, &n_t)) goto done;
    const turn *m = t;
    int n_m = n_t;
    /* A leading system message stands in for a missing system argument. */
    if ((!system || !*system) && n_m > 0 && m[0].role == CHAT_ROLE_SYSTEM) {
        system = m[0].text;
        m++;
        n_m--;
    }
    put(&sys, "");
    const char *s = put_system(&sys, f, system, tools) ? sys.s : NULL;
    if (sys.failed) goto done;
    put(&b, ""); /* an empty conversation still yields a string */
    switch (f) {
    case CHAT_FAMILY_LLAMA2: render_llama2(&b, bos, eos, s, m, n_m); break;
    case CHAT_FAMILY_LLAMA3:
    case CHAT_FAMILY_CHATML:
    case CHAT_FAMILY_QWEN3:
    case CHAT_FAMILY_ZEPHYR: render_headers(&b, f, eos, s, m, n_m, thinking); break;
    case CHAT_FAMILY_PHI3:
    case CHAT_FAMILY_PHI4: render_headers(&b, f, "<|end|>", s, m, n_m, thinking); break;
    case CHAT_FAMILY_GEMMA: render_gemma(&b, s, m, n_m); break;
    default: render_plain(&b, s, m, n_m); break;
    }
    ok = !b.failed;
done:
    for (int i = 0; i < n_t; i++) free(t[i].text);
    free(t);
    free(sys.s);
    if (!ok) {
        free(b.s);
        return NULL;
    }
    return b.s;
}
