/* test_chat.c - chat template families: detection, system prompt,
 * multi-turn conversations and assistant prefill. */
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "check.h"

static int renders(chat_family f, const char *sys, const chat_message *m, int n, const char *want) {
    char *got = chat_render(f, "<s>", "</s>", sys, m, n);
    int ok = got && !strcmp(got, want);
    if (!ok) printf("# %s: got [%s]\n#    want [%s]\n", chat_family_name(f), got ? got : "(null)", want);
    free(got);
    return ok;
}

int main(void) {
    CHECK(chat_family_detect("{% ... %}<|start_header_id|>{{ role }}") == CHAT_FAMILY_LLAMA3, "llama3 detected");
    CHECK(chat_family_detect("{{'<|im_start|>' + message['role']}}") == CHAT_FAMILY_CHATML, "chatml detected");
    CHECK(chat_family_detect("{{ '<|user|>\\n' + message['content'] }}") == CHAT_FAMILY_ZEPHYR, "zephyr detected");
    CHECK(chat_family_detect("{{ bos_token + '[INST] ' + content }}") == CHAT_FAMILY_LLAMA2, "llama2 detected");
    CHECK(chat_family_detect(NULL) == CHAT_FAMILY_PLAIN && chat_family_detect("{{ x }}") == CHAT_FAMILY_PLAIN,
          "no or unknown template: plain");
    CHECK(chat_family_parse("chatml") == CHAT_FAMILY_CHATML && chat_family_parse("nope") == -1, "family names parse");

    chat_message one[] = {{CHAT_ROLE_USER, "Hi"}};
    chat_message turns[] = {{CHAT_ROLE_USER, "Hi"}, {CHAT_ROLE_ASSISTANT, "Hello!"}, {CHAT_ROLE_USER, "Bye"}};
    chat_message prefill[] = {{CHAT_ROLE_USER, "Count"}, {CHAT_ROLE_ASSISTANT, "1, 2,"}};

    CHECK(renders(CHAT_FAMILY_CHATML, "Be brief.", one, 1,
                  "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
          "chatml: system + user");
    CHECK(renders(CHAT_FAMILY_CHATML, NULL, turns, 3,
                  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
                  "<|im_start|>assistant\n"),
          "chatml: multi-turn");
    CHECK(renders(CHAT_FAMILY_CHATML, NULL, prefill, 2, "<|im_start|>user\nCount<|im_end|>\n<|im_start|>assistant\n1, 2,"),
          "chatml: assistant prefill is left open");
    CHECK(renders(CHAT_FAMILY_LLAMA3, "Be brief.", one, 1,
                  "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi"
                  "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
          "llama3: system + user");
    CHECK(renders(CHAT_FAMILY_LLAMA3, NULL, prefill, 2,
                  "<|start_header_id|>user<|end_header_id|>\n\nCount<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n1, 2,"),
          "llama3: assistant prefill");
    CHECK(renders(CHAT_FAMILY_LLAMA2, "Be brief.", turns, 3,
                  "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] Bye [/INST]"),
          "llama2: system folded into the first turn, multi-turn");
    CHECK(renders(CHAT_FAMILY_LLAMA2, NULL, prefill, 2, "[INST] Count [/INST] 1, 2,"), "llama2: assistant prefill");
    CHECK(renders(CHAT_FAMILY_ZEPHYR, "Be brief.", one, 1, "<|system|>\nBe brief.</s>\n<|user|>\nHi</s>\n<|assistant|>\n"),
          "zephyr: system + user");
    CHECK(renders(CHAT_FAMILY_ZEPHYR, NULL, prefill, 2, "<|user|>\nCount</s>\n<|assistant|>\n1, 2,"), "zephyr: prefill");
    CHECK(renders(CHAT_FAMILY_PLAIN, "Be brief.", turns, 3, "Be brief.\n\nUser: Hi\nAssistant: Hello!\nUser: Bye\nAssistant:"),
          "plain: system and turns");
    CHECK(renders(CHAT_FAMILY_PLAIN, NULL, prefill, 2, "User: Count\nAssistant: 1, 2,"), "plain: prefill");
    CHECK_DONE();
}
