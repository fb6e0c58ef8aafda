/* chat.h - chat templates: messages -> one prompt string.
 *
 * We do not run Jinja. The family is recognised from the model's
 * `tokenizer.chat_template` text (or forced by the config), and each family
 * is rendered by hand-written code that produces exactly what the template
 * would. The rendered text contains the special tokens as text (e.g.
 * "<|im_start|>"), to be encoded with parse_special on. BOS is not part of
 * the rendered text: the tokenizer adds it when the model wants it.
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
    CHAT_FAMILY_COUNT
} chat_family;

typedef enum { CHAT_ROLE_SYSTEM, CHAT_ROLE_USER, CHAT_ROLE_ASSISTANT } chat_role;

typedef struct {
    chat_role role;
    const char *text; /* UTF-8, NUL-terminated */
} chat_message;

/* Recognises the family of a Jinja template text; NULL or unknown -> PLAIN. */
chat_family chat_family_detect(const char *template_text);
/* "llama2", "llama3", "chatml", "zephyr", "plain". */
const char *chat_family_name(chat_family f);
/* Parses a family name (as above); returns -1 when unknown. */
int chat_family_parse(const char *name);

/* Renders SYSTEM (may be NULL or "") and the N messages. Consecutive messages
 * of one role are expected to be merged by the caller. When the last message
 * is from the assistant, the output ends with its text left open (no
 * end-of-turn), so that generation continues it; otherwise the output ends
 * with the opening of an assistant turn. BOS_TEXT is the text of the BOS
 * token for families that repeat it between turns (llama2), or NULL.
 * Returns a malloc'd NUL-terminated string, or NULL when out of memory. */
char *chat_render(chat_family f, const char *bos_text, const char *eos_text, const char *system,
                  const chat_message *msgs, int n);

#endif
