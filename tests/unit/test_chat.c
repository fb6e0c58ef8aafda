/* test_chat.c - chat template families: detection (also on the real Llama 3
 * templates in $SHARED), and for every family the system prompt, a
 * multi-turn conversation and an assistant prefill, compared with what the
 * family's Jinja template renders (BOS left to the tokenizer). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/chat.h"
#include "tests/unit/check.h"

/* Renders and compares with WANT; prints both on a mismatch. */
static int renders(chat_family f, const char *sys, const chat_message *m, int n, const char *want) {
    char *got = chat_render(f, "<s>", "</s>", sys, NULL, m, n, 0);
    int ok = got && !strcmp(got, want);
    if (!ok) printf("# %s: got  [%s]\n#    want [%s]\n", chat_family_name(f), got ? got : "(null)", want);
    free(got);
    return ok;
}

/* Returns the family detected in the file PATH, or -1 when unreadable. */
static int detect_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return (int)chat_family_detect(buf);
}

static const chat_message one[] = {{.role = CHAT_ROLE_USER, .text = "Hi"}};
static const chat_message turns[] = {{.role = CHAT_ROLE_USER, .text = "Hi"}, {.role = CHAT_ROLE_ASSISTANT, .text = "Hello!"}, {.role = CHAT_ROLE_USER, .text = "Bye"}};
static const chat_message prefill[] = {{.role = CHAT_ROLE_USER, .text = "Count"}, {.role = CHAT_ROLE_ASSISTANT, .text = "1, 2,"}};
static const chat_message spaced[] = {{.role = CHAT_ROLE_USER, .text = "  Hi \n"}, {.role = CHAT_ROLE_ASSISTANT, .text = " Hello! "}, {.role = CHAT_ROLE_USER, .text = "Bye"}};
static const chat_message sys_first[] = {{.role = CHAT_ROLE_SYSTEM, .text = "Be brief."}, {.role = CHAT_ROLE_USER, .text = "Hi"}};

static void test_detect(void) {
    CHECK(chat_family_detect("{% ... %}<|start_header_id|>{{ role }}") == CHAT_FAMILY_LLAMA3, "llama3 detected");
    CHECK(chat_family_detect("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n'}}") ==
              CHAT_FAMILY_CHATML,
          "chatml detected");
    CHECK(chat_family_detect("{% if message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + eos_token }}") ==
              CHAT_FAMILY_ZEPHYR,
          "zephyr detected");
    CHECK(chat_family_detect("{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}") == CHAT_FAMILY_LLAMA2,
          "llama2 detected (also Mistral's [INST] templates)");
    CHECK(chat_family_detect(NULL) == CHAT_FAMILY_PLAIN && chat_family_detect("{{ x }}") == CHAT_FAMILY_PLAIN &&
              chat_family_detect("") == CHAT_FAMILY_PLAIN,
          "no or unknown template: plain");
    int ok = 1;
    for (int f = 0; f < CHAT_FAMILY_COUNT; f++) ok &= chat_family_parse(chat_family_name((chat_family)f)) == f;
    CHECK(ok && chat_family_parse("nope") == -1 && chat_family_parse(NULL) == -1 &&
              !strcmp(chat_family_name(CHAT_FAMILY_COUNT), "plain"),
          "family names parse back; unknown names are -1");

    const char *shared = check_shared_dir();
    char path[1024];
    static const char *const files[] = {"meta-llama-Llama-3.1-8B-Instruct.jinja", "meta-llama-Llama-3.2-3B-Instruct.jinja"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/data/chat-templates/%s", shared, files[i]);
        if (access(path, R_OK)) SKIP("%s: ../shared absent", files[i]);
        else CHECK(detect_file(path) == CHAT_FAMILY_LLAMA3, "%s is detected as llama3", files[i]);
    }
    snprintf(path, sizeof path, "%s/models/tokenizers/llama3-bpe/tokenizer_config.json", shared);
    if (access(path, R_OK)) SKIP("Llama 3 tokenizer_config.json: ../shared absent");
    else CHECK(detect_file(path) == CHAT_FAMILY_LLAMA3, "the Llama 3 (8B) chat_template is detected as llama3");
}

static void test_llama3(void) {
    CHECK(renders(CHAT_FAMILY_LLAMA3, "Be brief.", one, 1,
                  "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n"),
          "llama3: system + user");
    CHECK(renders(CHAT_FAMILY_LLAMA3, NULL, turns, 3,
                  "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n"),
          "llama3: multi-turn, no system turn without a system prompt");
    CHECK(renders(CHAT_FAMILY_LLAMA3, NULL, prefill, 2,
                  "<|start_header_id|>user<|end_header_id|>\n\nCount<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n1, 2,"),
          "llama3: assistant prefill is left open");
    CHECK(renders(CHAT_FAMILY_LLAMA3, " sys\n", spaced, 3,
                  "<|start_header_id|>system<|end_header_id|>\n\nsys<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n"),
          "llama3: every text is trimmed, as the template's | trim does");
    CHECK(renders(CHAT_FAMILY_LLAMA3, NULL, sys_first, 2,
                  "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n"),
          "llama3: a leading system message is the system prompt");
    CHECK(renders(CHAT_FAMILY_LLAMA3, NULL, NULL, 0, "<|start_header_id|>assistant<|end_header_id|>\n\n"),
          "llama3: an empty conversation opens the assistant turn");
}

static void test_chatml(void) {
    CHECK(renders(CHAT_FAMILY_CHATML, "Be brief.", one, 1,
                  "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
          "chatml: system + user");
    CHECK(renders(CHAT_FAMILY_CHATML, NULL, turns, 3,
                  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
                  "<|im_start|>assistant\n"),
          "chatml: multi-turn");
    CHECK(renders(CHAT_FAMILY_CHATML, NULL, prefill, 2, "<|im_start|>user\nCount<|im_end|>\n<|im_start|>assistant\n1, 2,"),
          "chatml: assistant prefill is left open");
    static const chat_message mid[] = {{.role = CHAT_ROLE_USER, .text = "a"}, {.role = CHAT_ROLE_SYSTEM, .text = "b"}, {.role = CHAT_ROLE_USER, .text = "c"}};
    CHECK(renders(CHAT_FAMILY_CHATML, "s", mid, 3,
                  "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\na<|im_end|>\n<|im_start|>system\nb<|im_end|>\n"
                  "<|im_start|>user\nc<|im_end|>\n<|im_start|>assistant\n"),
          "chatml: a system message inside the conversation is a system turn; text is not trimmed");
}

/* Qwen3's template (the parts that matter here, as Qwen/Qwen3-8B ships it):
 * ChatML, "<think>" literals, and the empty thought when thinking is off. */
static const char qwen3_template[] =
    "{%- for message in messages %}{%- if message.role == \"user\" %}{{- '<|im_start|>' + message.role + '\\n' + "
    "message.content + '<|im_end|>' + '\\n' }}{%- elif message.role == \"assistant\" %}{%- if '</think>' in content "
    "%}{%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}"
    "{%- endif %}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- if "
    "enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}";

/* Renders with THINKING and compares with WANT. */
static int renders_thinking(chat_family f, const chat_message *m, int n, int thinking, const char *want) {
    char *got = chat_render(f, NULL, NULL, NULL, NULL, m, n, thinking);
    int ok = got && !strcmp(got, want);
    if (!ok) printf("# %s: got  [%s]\n#    want [%s]\n", chat_family_name(f), got ? got : "(null)", want);
    free(got);
    return ok;
}

static void test_qwen3(void) {
    CHECK(chat_family_detect(qwen3_template) == CHAT_FAMILY_QWEN3, "qwen3 detected (ChatML with <think>)");
    CHECK(renders_thinking(CHAT_FAMILY_QWEN3, turns, 3, 0,
                           "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n"
                           "Bye<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"),
          "qwen3, thinking off: the answer opens with an empty thought (enable_thinking=false)");
    CHECK(renders_thinking(CHAT_FAMILY_QWEN3, turns, 3, 1,
                           "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n"
                           "Bye<|im_end|>\n<|im_start|>assistant\n"),
          "qwen3, thinking on: ChatML, the model opens its own thought");
    CHECK(renders_thinking(CHAT_FAMILY_QWEN3, prefill, 2, 0,
                           "<|im_start|>user\nCount<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n1, 2,"),
          "qwen3, thinking off: an assistant prefill follows the empty thought, left open");
    CHECK(renders_thinking(CHAT_FAMILY_CHATML, one, 1, 0, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n") &&
              renders_thinking(CHAT_FAMILY_CHATML, one, 1, 1, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
          "chatml (Qwen2.5): no thought either way");
    CHECK(chat_tool_syntax_of(CHAT_FAMILY_QWEN3) == chat_tool_syntax_of(CHAT_FAMILY_CHATML),
          "qwen3 calls tools with Qwen2.5's Hermes tags");
}

/* Gemma 3's template, abridged (as google/gemma-3-1b-it ships it). */
static const char gemma_template[] =
    "{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}{%- set first_user_prefix = messages[0]['content'] + "
    "'\\n\\n' -%}{%- set loop_messages = messages[1:] -%}{%- endif -%}{%- for message in loop_messages -%}{%- if "
    "(message['role'] == 'assistant') -%}{%- set role = \"model\" -%}{%- else -%}{%- set role = message['role'] -%}"
    "{%- endif -%}{{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}{{ "
    "message['content'] | trim }}{{ '<end_of_turn>\\n' }}{%- endfor -%}{%- if add_generation_prompt -%}"
    "{{'<start_of_turn>model\\n'}}{%- endif -%}";

static void test_gemma(void) {
    CHECK(chat_family_detect(gemma_template) == CHAT_FAMILY_GEMMA && chat_family_parse("gemma") == CHAT_FAMILY_GEMMA,
          "gemma detected (<start_of_turn>) and named");
    CHECK(renders(CHAT_FAMILY_GEMMA, " Be brief. ", turns, 3,
                  "<start_of_turn>user\n Be brief. \n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
                  "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"),
          "gemma: the system prompt opens the first user turn after a blank line, 'model' answers");
    CHECK(renders(CHAT_FAMILY_GEMMA, NULL, prefill, 2, "<start_of_turn>user\nCount<end_of_turn>\n<start_of_turn>model\n1, 2,"),
          "gemma: an assistant prefill is left open");
    static const chat_message mid[] = {{.role = CHAT_ROLE_USER, .text = " a "},
                                       {.role = CHAT_ROLE_SYSTEM, .text = "b"},
                                       {.role = CHAT_ROLE_USER, .text = "c"}};
    CHECK(renders(CHAT_FAMILY_GEMMA, NULL, mid, 3,
                  "<start_of_turn>user\na<end_of_turn>\n<start_of_turn>user\nb\n\nc<end_of_turn>\n<start_of_turn>model\n"),
          "gemma: a later system message opens the next turn's text; message texts are trimmed");
    CHECK(renders(CHAT_FAMILY_GEMMA, NULL, NULL, 0, "<start_of_turn>model\n"), "gemma: an empty conversation opens the model turn");
}

/* Phi-3.5-mini-instruct's template. */
static const char phi3_template[] =
    "{% for message in messages %}{% if message['role'] == 'system' and message['content'] %}{{'<|system|>\\n' + "
    "message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\\n' + message['content'] + "
    "'<|end|>\\n'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>\\n' + message['content'] + "
    "'<|end|>\\n'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ "
    "eos_token }}{% endif %}";

static void test_phi3(void) {
    CHECK(chat_family_detect(phi3_template) == CHAT_FAMILY_PHI3 && chat_family_parse("phi3") == CHAT_FAMILY_PHI3,
          "phi3 detected (<|user|> with <|end|>) and named");
    CHECK(renders(CHAT_FAMILY_PHI3, "Be brief.", turns, 3,
                  "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n<|user|>\nBye<|end|>\n"
                  "<|assistant|>\n"),
          "phi3: <|end|> closes each turn (not the tokenizer's EOS), the assistant turn is opened");
    CHECK(renders(CHAT_FAMILY_PHI3, NULL, prefill, 2, "<|user|>\nCount<|end|>\n<|assistant|>\n1, 2,"),
          "phi3: an assistant prefill is left open");
    static const char phi4_template[] =
        "{% for message in messages %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% else %}{{ eos_token }}{% endif %}";
    CHECK(chat_family_detect(phi4_template) == CHAT_FAMILY_PHI4 && chat_family_parse("phi4") == CHAT_FAMILY_PHI4,
          "phi4 detected (<|end|> and <|assistant|>, the role spliced in) and named");
    CHECK(renders(CHAT_FAMILY_PHI4, "Be brief.", turns, 3,
                  "<|system|>Be brief.<|end|><|user|>Hi<|end|><|assistant|>Hello!<|end|><|user|>Bye<|end|><|assistant|>"),
          "phi4: Phi-4-mini's turns, no newlines");
}

static void test_zephyr(void) {
    CHECK(renders(CHAT_FAMILY_ZEPHYR, "Be brief.", one, 1, "<|system|>\nBe brief.</s>\n<|user|>\nHi</s>\n<|assistant|>\n"),
          "zephyr: system + user");
    CHECK(renders(CHAT_FAMILY_ZEPHYR, NULL, turns, 3,
                  "<|user|>\nHi</s>\n<|assistant|>\nHello!</s>\n<|user|>\nBye</s>\n<|assistant|>\n"),
          "zephyr: multi-turn");
    CHECK(renders(CHAT_FAMILY_ZEPHYR, NULL, prefill, 2, "<|user|>\nCount</s>\n<|assistant|>\n1, 2,"),
          "zephyr: assistant prefill is left open");
}

static void test_llama2(void) {
    CHECK(renders(CHAT_FAMILY_LLAMA2, "Be brief.", one, 1, "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST]"),
          "llama2: system folded into the first user turn");
    CHECK(renders(CHAT_FAMILY_LLAMA2, "Be brief.", turns, 3,
                  "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] Bye [/INST]"),
          "llama2: multi-turn with EOS and BOS between turns");
    CHECK(renders(CHAT_FAMILY_LLAMA2, NULL, prefill, 2, "[INST] Count [/INST] 1, 2,"), "llama2: assistant prefill");
    CHECK(renders(CHAT_FAMILY_LLAMA2, NULL, spaced, 3, "[INST] Hi [/INST] Hello! </s><s>[INST] Bye [/INST]"),
          "llama2: turns are stripped, as the template's .strip() does");
    CHECK(renders(CHAT_FAMILY_LLAMA2, NULL, sys_first, 2, "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST]"),
          "llama2: a leading system message is the system prompt");
    char *r = chat_render(CHAT_FAMILY_LLAMA2, NULL, NULL, NULL, NULL, turns, 3, 0);
    CHECK(r && !strcmp(r, "[INST] Hi [/INST] Hello! [INST] Bye [/INST]"), "llama2: NULL BOS/EOS texts render as empty");
    free(r);
}

static void test_plain(void) {
    CHECK(renders(CHAT_FAMILY_PLAIN, "Be brief.", one, 1, "Be brief.\n\nUser: Hi\nAssistant:"), "plain: system + user");
    CHECK(renders(CHAT_FAMILY_PLAIN, "Be brief.", turns, 3, "Be brief.\n\nUser: Hi\nAssistant: Hello!\nUser: Bye\nAssistant:"),
          "plain: system and turns");
    CHECK(renders(CHAT_FAMILY_PLAIN, NULL, prefill, 2, "User: Count\nAssistant: 1, 2,"), "plain: prefill");
    CHECK(chat_render(CHAT_FAMILY_PLAIN, NULL, NULL, NULL, NULL, NULL, -1, 0) == NULL, "a negative message count is refused");
}


/* A conversation with a tool: the user asks, the assistant says a word and
 * calls the tool, the user returns its result. */
static const chat_tool weather = {
    .name = "get_weather",
    .description = "Get the \"weather\"",
    .schema_json = "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}"};
static const chat_part call_parts[] = {
    {.type = CHAT_PART_TEXT, .text = "Let me check."},
    {.type = CHAT_PART_TOOL_CALL, .id = "toolu_1", .name = "get_weather", .input_json = "{\"city\":\"Paris\",\"days\":[1,2]}"}};
static const chat_part result_parts[] = {{.type = CHAT_PART_TOOL_RESULT, .id = "toolu_1", .text = "18C"}};
static const chat_message tool_turns[] = {{.role = CHAT_ROLE_USER, .text = "Weather in Paris?"},
                                          {.role = CHAT_ROLE_ASSISTANT, .parts = call_parts, .n_parts = 2},
                                          {.role = CHAT_ROLE_USER, .parts = result_parts, .n_parts = 1}};

/* Renders TOOL_TURNS with TS and compares with WANT. */
static int renders_tools(chat_family f, const char *sys, const chat_toolset *ts, const chat_message *m, int n,
                         const char *want) {
    char *got = chat_render(f, "<s>", "</s>", sys, ts, m, n, 0);
    int ok = got && !strcmp(got, want);
    if (!ok) printf("# %s: got  [%s]\n#    want [%s]\n", chat_family_name(f), got ? got : "(null)", want);
    free(got);
    return ok;
}

#define HERMES_TOOLS                                                                                                   \
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"                                 \
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"                            \
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the \\\"weather\\\"\", " \
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": "       \
    "[\"city\"]}}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within " \
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "                      \
    "<args-json-object>}\n</tool_call>"
#define HERMES_CALL "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, 2]}}\n</tool_call>"

static void test_tools(void) {
    chat_toolset ts = {.tools = &weather, .n_tools = 1};
    CHECK(renders_tools(CHAT_FAMILY_LLAMA3, "Be brief.", &ts, tool_turns, 3,
                        "<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n"
                        "You have access to the following functions. To call a function, please respond with JSON for a "
                        "function call.Respond in the format {\"name\": function name, \"parameters\": dictionary of "
                        "argument name and its value}.Do not use variables.\n\n"
                        "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n"
                        "        \"description\": \"Get the \\\"weather\\\"\",\n        \"parameters\": {\n"
                        "            \"type\": \"object\",\n            \"properties\": {\n                \"city\": {\n"
                        "                    \"type\": \"string\"\n                }\n            },\n"
                        "            \"required\": [\n                \"city\"\n            ]\n        }\n    }\n}\n\n"
                        "Be brief.<|eot_id|>"
                        "<|start_header_id|>user<|end_header_id|>\n\nWeather in Paris?<|eot_id|>"
                        "<|start_header_id|>assistant<|end_header_id|>\n\nLet me check.\n"
                        "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": [1, 2]}}<|eot_id|>"
                        "<|start_header_id|>ipython<|end_header_id|>\n\n18C<|eot_id|>"
                        "<|start_header_id|>assistant<|end_header_id|>\n\n"),
          "llama3: tools in the system turn (indent 4), a call as {\"name\", \"parameters\"} JSON, the result as an "
          "ipython turn (Llama 3.1's convention)");
    CHECK(renders_tools(CHAT_FAMILY_CHATML, "Be brief.", &ts, tool_turns, 3,
                        "<|im_start|>system\nBe brief.\n\n" HERMES_TOOLS "<|im_end|>\n"
                        "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
                        "<|im_start|>assistant\nLet me check.\n" HERMES_CALL "<|im_end|>\n"
                        "<|im_start|>user\n<tool_response>\n18C\n</tool_response><|im_end|>\n"
                        "<|im_start|>assistant\n"),
          "chatml: Qwen2.5's <tools>, <tool_call> and <tool_response> text");
    CHECK(renders_tools(CHAT_FAMILY_ZEPHYR, NULL, &ts, tool_turns, 3,
                        "<|system|>\n" HERMES_TOOLS "</s>\n<|user|>\nWeather in Paris?</s>\n"
                        "<|assistant|>\nLet me check.\n" HERMES_CALL "</s>\n"
                        "<|user|>\n<tool_response>\n18C\n</tool_response></s>\n<|assistant|>\n"),
          "zephyr: the Hermes text in its turns, the tool block as the system turn");
    CHECK(renders_tools(CHAT_FAMILY_LLAMA2, NULL, &ts, tool_turns, 3,
                        "[INST] <<SYS>>\n" HERMES_TOOLS "\n<</SYS>>\n\nWeather in Paris? [/INST] Let me check.\n" HERMES_CALL
                        " </s><s>[INST] <tool_response>\n18C\n</tool_response> [/INST]"),
          "llama2: the tool block in <<SYS>>, calls and results inline");
    CHECK(renders_tools(CHAT_FAMILY_PLAIN, NULL, &ts, tool_turns, 3,
                        HERMES_TOOLS "\n\nUser: Weather in Paris?\nAssistant: Let me check.\n" HERMES_CALL
                        "\nUser: <tool_response>\n18C\n</tool_response>\nAssistant:"),
          "plain: the Hermes text");

    /* tool_choice */
    char *none_prompt = chat_render(CHAT_FAMILY_CHATML, NULL, NULL, "S", NULL, tool_turns, 1, 0);
    ts.choice = CHAT_TOOL_CHOICE_NONE;
    CHECK(none_prompt && renders_tools(CHAT_FAMILY_CHATML, "S", &ts, tool_turns, 1, none_prompt) &&
              renders_tools(CHAT_FAMILY_LLAMA3, NULL, &ts, one, 1,
                            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                            "<|start_header_id|>assistant<|end_header_id|>\n\n"),
          "tool_choice none renders no tools");
    free(none_prompt);
    ts.choice = CHAT_TOOL_CHOICE_TOOL;
    ts.choice_name = "get_weather";
    ts.single_call = 1;
    CHECK(renders_tools(CHAT_FAMILY_CHATML, NULL, &ts, one, 1,
                        "<|im_start|>system\n" HERMES_TOOLS
                        "\n\nYou must call the function get_weather. Call at most one function.<|im_end|>\n"
                        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
          "chatml: tool_choice tool and disable_parallel_tool_use add a sentence after the tools");
    ts.choice = CHAT_TOOL_CHOICE_ANY;
    ts.single_call = 0;
    char *any = chat_render(CHAT_FAMILY_LLAMA3, NULL, NULL, NULL, &ts, one, 1, 0);
    CHECK(any && strstr(any, "]\n        }\n    }\n}\n\nYou must call at least one function.\n\n<|eot_id|>"),
          "llama3: tool_choice any: the sentence after the tools, no system prompt");
    free(any);

    /* Results with an error, several results, text after them, and prefill after a call. */
    static const chat_part two_results[] = {{.type = CHAT_PART_TOOL_RESULT, .id = "a", .text = "ok"},
                                            {.type = CHAT_PART_TOOL_RESULT, .id = "b", .text = "boom", .is_error = 1},
                                            {.type = CHAT_PART_TEXT, .text = " and?"},
                                            {.type = CHAT_PART_TEXT, .text = "Go on."}};
    static const chat_message res2[] = {{.role = CHAT_ROLE_USER, .parts = two_results, .n_parts = 4}};
    CHECK(renders_tools(CHAT_FAMILY_LLAMA3, NULL, NULL, res2, 1,
                        "<|start_header_id|>ipython<|end_header_id|>\n\nok<|eot_id|>"
                        "<|start_header_id|>ipython<|end_header_id|>\n\nError: boom<|eot_id|>"
                        "<|start_header_id|>user<|end_header_id|>\n\nand?\n\nGo on.<|eot_id|>"
                        "<|start_header_id|>assistant<|end_header_id|>\n\n"),
          "llama3: each result its own ipython turn (is_error as \"Error: \"), the text after them a user turn");
    CHECK(renders_tools(CHAT_FAMILY_CHATML, NULL, NULL, res2, 1,
                        "<|im_start|>user\n<tool_response>\nok\n</tool_response>\n<tool_response>\nError: boom\n"
                        "</tool_response>\n and?\n\nGo on.<|im_end|>\n<|im_start|>assistant\n"),
          "chatml: results inline, texts joined with a blank line");
    static const chat_message open_call[] = {{.role = CHAT_ROLE_USER, .text = "Hi"},
                                             {.role = CHAT_ROLE_ASSISTANT, .parts = call_parts + 1, .n_parts = 1}};
    CHECK(renders_tools(CHAT_FAMILY_CHATML, NULL, NULL, open_call, 2,
                        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n" HERMES_CALL),
          "chatml: an assistant turn holding only a call, left open when last");
    const chat_tool_syntax *l3 = chat_tool_syntax_of(CHAT_FAMILY_LLAMA3), *h = chat_tool_syntax_of(CHAT_FAMILY_ZEPHYR);
    CHECK(!strcmp(l3->args_key, "parameters") && !strcmp(h->args_key, "arguments") &&
              !strcmp(h->call_open, "<tool_call>\n") && chat_tool_syntax_of(CHAT_FAMILY_CHATML) == h,
          "chat_tool_syntax_of: Llama 3.1 JSON for llama3, the Hermes tags for the others");
}

int main(void) {
    test_detect();
    test_llama3();
    test_chatml();
    test_qwen3();
    test_gemma();
    test_phi3();
    test_zephyr();
    test_llama2();
    test_plain();
    test_tools();
    CHECK_DONE();
}
