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
    char *got = chat_render(f, "<s>", "</s>", sys, m, n);
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

static const chat_message one[] = {{CHAT_ROLE_USER, "Hi"}};
static const chat_message turns[] = {{CHAT_ROLE_USER, "Hi"}, {CHAT_ROLE_ASSISTANT, "Hello!"}, {CHAT_ROLE_USER, "Bye"}};
static const chat_message prefill[] = {{CHAT_ROLE_USER, "Count"}, {CHAT_ROLE_ASSISTANT, "1, 2,"}};
static const chat_message spaced[] = {{CHAT_ROLE_USER, "  Hi \n"}, {CHAT_ROLE_ASSISTANT, " Hello! "}, {CHAT_ROLE_USER, "Bye"}};
static const chat_message sys_first[] = {{CHAT_ROLE_SYSTEM, "Be brief."}, {CHAT_ROLE_USER, "Hi"}};

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
    static const chat_message mid[] = {{CHAT_ROLE_USER, "a"}, {CHAT_ROLE_SYSTEM, "b"}, {CHAT_ROLE_USER, "c"}};
    CHECK(renders(CHAT_FAMILY_CHATML, "s", mid, 3,
                  "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\na<|im_end|>\n<|im_start|>system\nb<|im_end|>\n"
                  "<|im_start|>user\nc<|im_end|>\n<|im_start|>assistant\n"),
          "chatml: a system message inside the conversation is a system turn; text is not trimmed");
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
    char *r = chat_render(CHAT_FAMILY_LLAMA2, NULL, NULL, NULL, turns, 3);
    CHECK(r && !strcmp(r, "[INST] Hi [/INST] Hello! [INST] Bye [/INST]"), "llama2: NULL BOS/EOS texts render as empty");
    free(r);
}

static void test_plain(void) {
    CHECK(renders(CHAT_FAMILY_PLAIN, "Be brief.", one, 1, "Be brief.\n\nUser: Hi\nAssistant:"), "plain: system + user");
    CHECK(renders(CHAT_FAMILY_PLAIN, "Be brief.", turns, 3, "Be brief.\n\nUser: Hi\nAssistant: Hello!\nUser: Bye\nAssistant:"),
          "plain: system and turns");
    CHECK(renders(CHAT_FAMILY_PLAIN, NULL, prefill, 2, "User: Count\nAssistant: 1, 2,"), "plain: prefill");
    CHECK(chat_render(CHAT_FAMILY_PLAIN, NULL, NULL, NULL, NULL, -1) == NULL, "a negative message count is refused");
}

int main(void) {
    test_detect();
    test_llama3();
    test_chatml();
    test_zephyr();
    test_llama2();
    test_plain();
    CHECK_DONE();
}
