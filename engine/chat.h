/* chat.h - chat templates: messages -> one prompt string.
 *
 * We do not run Jinja. The family is recognised from the model's
 * `tokenizer.chat_template` text (or forced by the config), and each family
 * is rendered by hand-written code that produces exactly what the template
 * would. The rendered text contains the special tokens as text (e.g.
 * "<|im_start|>"), to be encoded with parse_special on. BOS is not part of
 * the rendered text: the tokenizer adds it when the model wants it.
 *
 * Messages may carry tool calls and tool results, and a request may carry
 * tools: they are rendered in each family's tool convention (chat.c lists
 * them; chat_tool_syntax_of() holds the call syntax). Tool calls in the
 * model's OUTPUT are not parsed yet: a parser should build on
 * chat_tool_syntax_of() rather than repeat its strings.
 */
#ifndef ILPD_CHAT_H
#define ILPD_CHAT_H

#include <stddef.h>

typedef enum {
    CHAT_FAMILY_PLAIN = 0, /* "User: ...\nAssistant: ..." for models without a template */
    CHAT_FAMILY_LLAMA2,    /* [INST] ... [/INST] */
    CHAT_FAMILY_LLAMA3,    /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    CHAT_FAMILY_CHATML,    /* <|im_start|>role\n...<|im_end|>\n */
    CHAT_FAMILY_ZEPHYR,    /* <|user|>\n...</s>\n */
    CHAT_FAMILY_QWEN3,     /* ChatML with thinking: an empty <think></think> opens the answer when thinking is off */
    CHAT_FAMILY_GEMMA,     /* <start_of_turn>user\n...<end_of_turn>\n<start_of_turn>model\n */
    CHAT_FAMILY_PHI3,      /* <|user|>\n...<|end|>\n<|assistant|>\n */
    CHAT_FAMILY_PHI4,      /* <|user|>...<|end|><|assistant|> (Phi-4-mini) */
    CHAT_FAMILY_COUNT
} chat_family;

typedef enum { CHAT_ROLE_SYSTEM, CHAT_ROLE_USER, CHAT_ROLE_ASSISTANT } chat_role;

/* One piece of a message: text, a tool call (assistant turns) or a tool's
 * result (user turns). Strings are UTF-8, NUL-terminated, owned by the caller. */
typedef enum { CHAT_PART_TEXT, CHAT_PART_TOOL_CALL, CHAT_PART_TOOL_RESULT } chat_part_type;

typedef struct {
    chat_part_type type;
    const char *text;       /* TEXT: the text; TOOL_RESULT: the result's text (NULL = "") */
    const char *id;         /* TOOL_CALL: the call's id; TOOL_RESULT: the id of the call it answers */
    const char *name;       /* TOOL_CALL: the tool called */
    const char *input_json; /* TOOL_CALL: its input, a JSON object's text (NULL = "{}") */
    int is_error;           /* TOOL_RESULT: the tool failed (rendered as "Error: " before the text) */
} chat_part;

typedef struct {
    chat_role role;
    const char *text;       /* UTF-8, NUL-terminated; used when n_parts is 0 (NULL = "") */
    const chat_part *parts; /* n_parts > 0: the message is these, in order (text is ignored) */
    int n_parts;
} chat_message;

/* A tool the model may call (the Messages API's custom tools). */
typedef struct {
    const char *name;        /* [a-zA-Z0-9_-]{1,64} (the caller validates) */
    const char *description; /* NULL when none */
    const char *schema_json; /* the input_schema object as JSON text (NULL = "{}") */
} chat_tool;

typedef enum {
    CHAT_TOOL_CHOICE_AUTO = 0, /* the model decides */
    CHAT_TOOL_CHOICE_ANY,      /* it must call some tool */
    CHAT_TOOL_CHOICE_TOOL,     /* it must call the tool `choice_name` */
    CHAT_TOOL_CHOICE_NONE,     /* no tool: the tools are not rendered at all */
} chat_tool_choice;

typedef struct {
    const chat_tool *tools;
    int n_tools;
    chat_tool_choice choice;
    const char *choice_name; /* for CHAT_TOOL_CHOICE_TOOL */
    int single_call;         /* disable_parallel_tool_use: at most one call per answer */
} chat_toolset;

/* How a family writes one tool call, one result and the tool list: the one
 * place that knows the syntax, so that a parser of the model's output can
 * use the same strings. A call is rendered as
 *   call_open {"name": "NAME", "<args_key>": INPUT} call_close
 * (INPUT in Python's json.dumps spacing, as the templates' tojson prints it),
 * a result as result_open [Error: ]TEXT result_close (families with
 * result_turn put each result in a turn of that role instead of inline). */
typedef struct {
    const char *call_open, *call_close; /* "<tool_call>\n" / "\n</tool_call>", or "" / "" (llama3) */
    const char *args_key;               /* "arguments" (Hermes), "parameters" (Llama 3.1) */
    const char *result_open, *result_close;
    const char *result_turn;            /* "ipython" (llama3), or NULL: results stay inline */
    int tools_indent;                   /* the tool list's JSON indent (0: one line per tool) */
    /* The tool block: tools_intro, then each tool between tool_before and
     * tool_after, tools_outro, then the tool_choice sentence between
     * note_before and note_after; before the system prompt (tools_first)
     * or after it and a blank line. */
    int tools_first;
    const char *tools_intro, *tool_before, *tool_after, *tools_outro, *note_before, *note_after;
} chat_tool_syntax;

/* The syntax of family F (llama3: Llama 3.1's JSON calls and ipython turns;
 * every other family: the Hermes/Qwen2.5 tags). Returns a static object. */
const chat_tool_syntax *chat_tool_syntax_of(chat_family f);

/* Recognises the family of a Jinja template text; NULL or unknown -> PLAIN. */
chat_family chat_family_detect(const char *template_text);
/* "llama2", "llama3", "chatml", "zephyr", "qwen3", "gemma", "phi3", "phi4", "plain". */
const char *chat_family_name(chat_family f);
/* Parses a family name (as above); returns -1 when unknown. */
int chat_family_parse(const char *name);

/* Renders SYSTEM (may be NULL or ""), the tools (TOOLS may be NULL; nothing
 * is rendered for no tools or choice NONE) and the N messages. Consecutive
 * messages of one role are expected to be merged by the caller; within a
 * message, consecutive text parts are joined with a blank line and calls and
 * results go on lines of their own (chat.c says how each family writes them).
 * When the last message is from the assistant, the output ends with its
 * content left open (no end-of-turn), so that generation continues it;
 * otherwise the output ends with the opening of an assistant turn. BOS_TEXT
 * is the text of the BOS token for families that repeat it between turns
 * (llama2), or NULL. THINKING: the request lets the model think (families
 * with thinking render the opened assistant turn accordingly; the others
 * ignore it). Returns a malloc'd NUL-terminated string (the caller frees
 * it), or NULL when out of memory. */
char *chat_render(chat_family f, const char *bos_text, const char *eos_text, const char *system,
                  const chat_toolset *tools, const chat_message *msgs, int n, int thinking);

#endif
