/* test_grammar.c - GBNF parsing, JSON Schema -> GBNF, the matcher, token
 * masks against brute force, and seeded random walks whose output must parse
 * with cJSON and validate against the schema (a small validator below).
 * With $SHARED/models/tokenizers/llama3-bpe/tokenizer.json present, masks on
 * the real Llama 3 vocabulary are checked against grammar_token_ok too and
 * their time is printed (information only, not asserted). */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/grammar.h"
#include "tests/unit/check.h"

/* ------------------------------------------------------------------ */
/* helpers                                                             */

/* 1 when TEXT is accepted whole and root may end there. */
static int matches(const grammar *g, const char *text) {
    grammar_state *s = grammar_state_new(g);
    int ok = s && grammar_state_accept(s, text, strlen(text)) == 0 && grammar_state_done(s);
    grammar_state_free(s);
    return ok;
}

/* The grammar of SCHEMA with root rule "root", or NULL (ERR set). */
static grammar *schema_grammar(const char *schema, char *err, size_t errlen) {
    char *text = grammar_json_schema_to_gbnf(NULL, schema, "root", err, errlen);
    if (!text) return NULL;
    grammar *g = grammar_parse(text, "root", err, errlen);
    if (!g) printf("# grammar text:\n%s\n", text);
    free(text);
    return g;
}

static uint64_t rng_state = 42;
static uint32_t rnd(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (uint32_t)((z ^ (z >> 31)) >> 32);
}

/* ------------------------------------------------------------------ */
/* a small JSON Schema validator for the subset                        */

static int validate(const cJSON *v, const cJSON *s, const cJSON *root);

static const cJSON *resolve(const cJSON *root, const char *ref) {
    const char *p = ref + 1;
    const cJSON *at = root;
    while (*p == '/' && at) {
        char key[128];
        size_t k = 0;
        for (p++; *p && *p != '/' && k + 1 < sizeof key; p++) key[k++] = *p;
        key[k] = 0;
        at = cJSON_GetObjectItemCaseSensitive(at, key);
    }
    return at;
}

static size_t utf8_chars(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}

static int type_ok(const cJSON *v, const char *t, const cJSON *s) {
    if (!strcmp(t, "null")) return cJSON_IsNull(v);
    if (!strcmp(t, "boolean")) return cJSON_IsBool(v);
    if (!strcmp(t, "number")) return cJSON_IsNumber(v);
    if (!strcmp(t, "integer")) return cJSON_IsNumber(v) && v->valuedouble == (double)(long long)v->valuedouble;
    if (!strcmp(t, "string")) {
        const cJSON *mn = cJSON_GetObjectItem(s, "minLength"), *mx = cJSON_GetObjectItem(s, "maxLength");
        if (!cJSON_IsString(v)) return 0;
        size_t n = utf8_chars(v->valuestring);
        return (!mn || n >= (size_t)mn->valuedouble) && (!mx || n <= (size_t)mx->valuedouble);
    }
    if (!strcmp(t, "array")) {
        const cJSON *items = cJSON_GetObjectItem(s, "items");
        const cJSON *mn = cJSON_GetObjectItem(s, "minItems"), *mx = cJSON_GetObjectItem(s, "maxItems");
        if (!cJSON_IsArray(v)) return 0;
        int n = cJSON_GetArraySize(v);
        if ((mn && n < (int)mn->valuedouble) || (mx && n > (int)mx->valuedouble)) return 0;
        for (const cJSON *e = v->child; e && items; e = e->next)
            if (!validate(e, items, NULL)) return 0;
        return 1;
    }
    if (!strcmp(t, "object")) {
        const cJSON *props = cJSON_GetObjectItem(s, "properties"), *req = cJSON_GetObjectItem(s, "required");
        const cJSON *add = cJSON_GetObjectItem(s, "additionalProperties");
        if (!cJSON_IsObject(v)) return 0;
        for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
            if (!cJSON_GetObjectItemCaseSensitive(v, r->valuestring)) return 0;
        for (const cJSON *e = v->child; e; e = e->next) {
            const cJSON *ps = props ? cJSON_GetObjectItemCaseSensitive(props, e->string) : NULL;
            if (ps ? !validate(e, ps, NULL) : cJSON_IsFalse(add) || (cJSON_IsObject(add) && !validate(e, add, NULL)))
                return 0;
        }
        return 1;
    }
    return 0;
}

/* 1 when V is valid for schema S (ROOT: the document, for $ref; NULL keeps the last). */
static int validate(const cJSON *v, const cJSON *s, const cJSON *root) {
    static const cJSON *doc;
    if (root) doc = root;
    if (cJSON_IsTrue(s)) return 1;
    const cJSON *j;
    if ((j = cJSON_GetObjectItem(s, "$ref"))) return validate(v, resolve(doc, j->valuestring), NULL);
    if ((j = cJSON_GetObjectItem(s, "const"))) return cJSON_Compare(v, j, 1);
    if ((j = cJSON_GetObjectItem(s, "enum"))) {
        for (const cJSON *e = j->child; e; e = e->next)
            if (cJSON_Compare(v, e, 1)) return 1;
        return 0;
    }
    if ((j = cJSON_GetObjectItem(s, "anyOf")) || (j = cJSON_GetObjectItem(s, "oneOf"))) {
        for (const cJSON *e = j->child; e; e = e->next)
            if (validate(v, e, NULL)) return 1;
        return 0;
    }
    if ((j = cJSON_GetObjectItem(s, "allOf"))) {
        for (const cJSON *e = j->child; e; e = e->next)
            if (!validate(v, e, NULL)) return 0;
        return 1;
    }
    if (cJSON_IsTrue(cJSON_GetObjectItem(s, "nullable")) && cJSON_IsNull(v)) return 1;
    const cJSON *t = cJSON_GetObjectItem(s, "type");
    if (cJSON_IsString(t)) return type_ok(v, t->valuestring, s);
    if (cJSON_IsArray(t)) {
        for (const cJSON *e = t->child; e; e = e->next)
            if (type_ok(v, e->valuestring, s)) return 1;
        return 0;
    }
    if (cJSON_GetObjectItem(s, "properties")) return type_ok(v, "object", s);
    if (cJSON_GetObjectItem(s, "items")) return type_ok(v, "array", s);
    return 1;
}

/* ------------------------------------------------------------------ */
/* schemas                                                             */

static const char *S_WEATHER =
    "{\"type\":\"object\",\"properties\":{\"location\":{\"type\":\"string\",\"description\":\"City\"},"
    "\"unit\":{\"type\":\"string\",\"enum\":[\"celsius\",\"fahrenheit\"]}},\"required\":[\"location\"]}";

static const char *S_NESTED =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":3},"
    "\"matrix\":{\"type\":\"array\",\"items\":{\"type\":\"array\",\"items\":{\"type\":\"number\"}}},"
    "\"address\":{\"type\":\"object\",\"properties\":{\"street\":{\"type\":\"string\"},\"zip\":{\"type\":\"integer\"}},"
    "\"required\":[\"street\",\"zip\"]}},\"required\":[\"name\",\"address\"]}";

/* what the Vercel AI SDK sends for a zod object (zod-to-json-schema) */
static const char *S_ZOD =
    "{\"type\":\"object\",\"properties\":{\"recipe\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
    "\"ingredients\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
    "\"amount\":{\"type\":\"string\"}},\"required\":[\"name\",\"amount\"],\"additionalProperties\":false}},"
    "\"steps\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},\"required\":[\"name\",\"ingredients\",\"steps\"],"
    "\"additionalProperties\":false}},\"required\":[\"recipe\"],\"additionalProperties\":false,"
    "\"$schema\":\"http://json-schema.org/draft-07/schema#\"}";

static const char *S_TREE =
    "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"value\":{\"type\":\"integer\"},"
    "\"children\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"value\"]}},"
    "\"$ref\":\"#/$defs/node\"}";

static const char *S_MISC =
    "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"circle\"},\"r\":{\"type\":\"number\"},"
    "\"id\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"minLength\":2,\"maxLength\":4}]},"
    "\"opt\":{\"type\":[\"string\",\"null\"]},\"e\":{\"enum\":[1,\"two\",null,true,{\"a\":[1,2]}]},"
    "\"pts\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":2},"
    "\"n2\":{\"type\":\"boolean\",\"nullable\":true},"
    "\"extra\":{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}},"
    "\"required\":[\"kind\",\"id\",\"e\",\"pts\"],\"additionalProperties\":false}";

static const char *S_DEFS =
    "{\"definitions\":{\"color\":{\"enum\":[\"red\",\"green\"]}},\"type\":\"object\","
    "\"properties\":{\"c\":{\"$ref\":\"#/definitions/color\"},\"more\":{\"oneOf\":[{\"type\":\"null\"},"
    "{\"allOf\":[{\"$ref\":\"#/definitions/color\"}]}]}},\"required\":[\"c\"]}";

static const char *S_ALLOF =
    "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\"]},"
    "{\"type\":\"object\",\"properties\":{\"b\":{\"type\":\"integer\"}}}]}";

static const char *S_OPEN =
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"],"
    "\"additionalProperties\":true}";

static const char *S_ANY = "{}";

/* ------------------------------------------------------------------ */
/* GBNF parsing                                                        */

static void test_parse_errors(void) {
    char err[256];
    grammar *g = grammar_parse("root ::= \"a\" b\n\nb ::= c\n", "root", err, sizeof err);
    CHECK(!g && strstr(err, "line 3") && strstr(err, "undefined rule 'c'"), "undefined rule named with its line: %s", err);
    g = grammar_parse("root ::= \"a\"\nx ::= \"b\" )\n", "root", err, sizeof err);
    CHECK(!g && strstr(err, "line 2"), "a stray ')' is a syntax error on its line: %s", err);
    g = grammar_parse("root ::= \"a\n", "root", err, sizeof err);
    CHECK(!g && strstr(err, "line 1") && strstr(err, "unterminated"), "unterminated literal: %s", err);
    g = grammar_parse("root ::= x\n# comment\nx = \"b\"\n", "root", err, sizeof err);
    CHECK(!g && strstr(err, "line 3"), "a line without ::= is an error on its line: %s", err);
    g = grammar_parse("root ::= (\"a\" | \"b\"\n", "root", err, sizeof err);
    CHECK(!g && strstr(err, "')'"), "unclosed group: %s", err);
    g = grammar_parse("root ::= x \"a\" | \"b\"\nx ::= y? root\ny ::= \"c\"\n", "root", err, sizeof err);
    CHECK(!g && strstr(err, "left recursion"), "left recursion through a nullable prefix: %s", err);
    g = grammar_parse("root ::= [b-a]\n", "root", err, sizeof err);
    CHECK(!g && strstr(err, "range"), "reversed range: %s", err);
    g = grammar_parse("root ::= \"a\"{3,2}\n", "root", err, sizeof err);
    CHECK(!g && strstr(err, "max < min"), "bad repetition: %s", err);
    g = grammar_parse("start ::= \"a\"\n", "root", err, sizeof err);
    CHECK(!g && strstr(err, "no rule named 'root'"), "missing root: %s", err);
    g = grammar_parse("root ::= \"a\"\nroot ::= \"b\"\n", "root", err, sizeof err);
    CHECK(!g && strstr(err, "line 2") && strstr(err, "twice"), "a rule defined twice: %s", err);
    g = grammar_parse("root ::= \"\\q\"\n", "root", err, sizeof err);
    CHECK(!g && strstr(err, "escape"), "unknown escape: %s", err);
}

static void test_hand_grammars(void) {
    char err[256];
    const char *text = "# a comment line\n"
                       "root ::= greeting (\", \" name)* \"!\"   # trailing comment\n"
                       "greeting ::= \"hello\" |\n"
                       "    \"hi\"\n"
                       "name ::= [A-Z] [a-z]{1,3} digit?\n"
                       "digit ::= [0-9]\n";
    grammar *g = grammar_parse(text, "root", err, sizeof err);
    CHECK(g != NULL, "multi-line grammar with comments parses: %s", err);
    if (g) {
        CHECK(matches(g, "hello!"), "zero repetitions");
        CHECK(matches(g, "hi, Bob, Anna7!"), "repetitions, bounded counts, optional");
        CHECK(!matches(g, "hi, Bobby!"), "{1,3} bounds the count");
        CHECK(!matches(g, "hi, B!"), "{1,3} needs one");
        CHECK(!matches(g, "hello"), "incomplete is not done");
        CHECK(!matches(g, "hey!"), "wrong literal");
        grammar_free(g);
    }
    g = grammar_parse("root ::= [^\"\\\\\\x00-\\x1f]+ \"\\x41\\n\" [\\]x-]? .\n", "root", err, sizeof err);
    CHECK(g != NULL, "classes with escapes parse: %s", err);
    if (g) {
        CHECK(matches(g, "ab\xc3\xa9" "A\n]\x01"), "negated class with ranges, \\x and \\n in a literal, \\] and '.'");
        CHECK(matches(g, "aA\n-z"), "'-' at the end of a class is literal");
        CHECK(!matches(g, "a\"A\nz"), "'\"' excluded from the class");
        CHECK(!matches(g, "a\x1f" "A\nz"), "control byte excluded from the class");
        grammar_free(g);
    }
    /* ambiguity: several stacks alive at once */
    g = grammar_parse("root ::= \"ab\" \"c\"* \"d\" | \"a\" [b-c]+ \"e\" | x{2}\nx ::= \"ab\" | \"abc\"\n", "root", err,
                      sizeof err);
    CHECK(g != NULL, "ambiguous grammar parses: %s", err);
    if (g) {
        CHECK(matches(g, "abccd") && matches(g, "abcbe") && matches(g, "ababc") && matches(g, "abcab"),
              "every alternative of an ambiguous prefix stays alive");
        CHECK(!matches(g, "abcc") && !matches(g, "abce2"), "and ambiguity rejects what none accepts");
        grammar_free(g);
    }
    g = grammar_parse("root ::= \"a\" root | \"\"\n", "root", err, sizeof err);
    CHECK(g != NULL, "right recursion with an empty alternative: %s", err);
    if (g) {
        char buf[5001];
        memset(buf, 'a', 5000);
        buf[5000] = 0;
        CHECK(matches(g, "") && matches(g, buf), "5000 right-recursive steps (tail calls keep the stack flat)");
        grammar_free(g);
    }
}

/* ------------------------------------------------------------------ */
/* schemas: accept / reject                                            */

typedef struct {
    const char *text;
    int ok;
} sample;

/* TEXT with newlines and bytes outside ASCII shown as escapes (a static buffer). */
static const char *shown(const char *text) {
    static char buf[1024];
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p && n + 5 < sizeof buf; p++)
        n += (size_t)(*p >= 0x20 && *p < 0x7f ? snprintf(buf + n, 2, "%c", *p) : snprintf(buf + n, 5, "\\x%02x", *p));
    buf[n] = 0;
    return buf;
}

static void check_schema(const char *what, const char *schema, const sample *samples) {
    char err[256];
    grammar *g = schema_grammar(schema, err, sizeof err);
    CHECK(g != NULL, "%s: schema converts and parses: %s", what, err);
    if (!g) return;
    for (const sample *s = samples; s->text; s++)
        CHECK(matches(g, s->text) == s->ok, "%s: %s %s", what, s->ok ? "accepts" : "rejects", shown(s->text));
    grammar_free(g);
}

static void test_schemas(void) {
    check_schema("weather", S_WEATHER,
                 (const sample[]){{"{\"location\": \"Paris\"}", 1},
                                  {"{\"location\": \"Paris\", \"unit\": \"celsius\"}", 1},
                                  {"{\"location\": \"a\\\"b\\\\c\\n\\u00e9\xc3\xa9\"}", 1},
                                  {"{\"unit\": \"celsius\"}", 0},
                                  {"{\"unit\": \"celsius\", \"location\": \"Paris\"}", 0},
                                  {"{\"location\": \"Paris\", \"unit\": \"kelvin\"}", 0},
                                  {"{\"location\":\"Paris\"}", 0},
                                  {"{\"location\": \"Paris\", \"x\": 1}", 0},
                                  {"{\"location\": \"a\nb\"}", 0},
                                  {"{\"location\": \"\\ud800\"}", 0},
                                  {"{\"location\": \"\\x\"}", 0},
                                  {"{\"location\": \"\xc3\"}", 0},
                                  {NULL, 0}});
    check_schema("nested", S_NESTED,
                 (const sample[]){{"{\"name\": \"x\", \"address\": {\"street\": \"Main\", \"zip\": 12345}}", 1},
                                  {"{\"name\": \"x\", \"tags\": [], \"matrix\": [[1, 2.5], [], [-3e+10]], "
                                   "\"address\": {\"street\": \"\", \"zip\": -1}}",
                                   1},
                                  {"{\"name\": \"x\", \"tags\": [\"a\", \"b\", \"c\", \"d\"], \"address\": "
                                   "{\"street\": \"\", \"zip\": 0}}",
                                   0},
                                  {"{\"name\": \"x\", \"address\": {\"street\": \"Main\"}}", 0},
                                  {"{\"name\": \"x\", \"address\": {\"street\": \"M\", \"zip\": 1.5}}", 0},
                                  {"{\"name\": \"x\", \"matrix\": [[01]], \"address\": {\"street\": \"M\", \"zip\": 1}}", 0},
                                  {"{\"name\": \"x\", \"matrix\": [1], \"address\": {\"street\": \"M\", \"zip\": 1}}", 0},
                                  {NULL, 0}});
    check_schema("zod", S_ZOD,
                 (const sample[]){{"{\"recipe\": {\"name\": \"Soup\", \"ingredients\": [{\"name\": \"leek\", \"amount\": "
                                   "\"2\"}], \"steps\": [\"boil\", \"eat\"]}}",
                                   1},
                                  {"{\"recipe\": {\"name\": \"Soup\", \"ingredients\": [], \"steps\": []}}", 1},
                                  {"{\"recipe\": {\"name\": \"Soup\", \"steps\": []}}", 0},
                                  {"{\"recipe\": {\"name\": \"S\", \"ingredients\": [], \"steps\": []}, \"$schema\": 1}", 0},
                                  {NULL, 0}});
    check_schema("tree ($ref recursion)", S_TREE,
                 (const sample[]){{"{\"value\": 1}", 1},
                                  {"{\"value\": 1, \"children\": [{\"value\": 2, \"children\": [{\"value\": 3}]}, "
                                   "{\"value\": 4, \"children\": []}]}",
                                   1},
                                  {"{\"value\": 1, \"children\": [{\"children\": []}]}", 0},
                                  {NULL, 0}});
    check_schema("misc", S_MISC,
                 (const sample[]){{"{\"kind\": \"circle\", \"id\": 7, \"e\": 1, \"pts\": [1]}", 1},
                                  {"{\"kind\": \"circle\", \"r\": 0.5, \"id\": \"ab\", \"opt\": null, \"e\": {\"a\": [1, 2]}, "
                                   "\"pts\": [1, -2], \"n2\": null, \"extra\": {\"x\": 1, \"y\": 2}}",
                                   1},
                                  {"{\"kind\": \"circle\", \"id\": \"abcd\", \"opt\": \"s\", \"e\": null, \"pts\": [0], "
                                   "\"n2\": true, \"extra\": {}}",
                                   1},
                                  {"{\"kind\": \"square\", \"id\": 7, \"e\": 1, \"pts\": [1]}", 0},
                                  {"{\"kind\": \"circle\", \"id\": \"a\", \"e\": 1, \"pts\": [1]}", 0},
                                  {"{\"kind\": \"circle\", \"id\": \"abcde\", \"e\": 1, \"pts\": [1]}", 0},
                                  {"{\"kind\": \"circle\", \"id\": 7, \"e\": 2, \"pts\": [1]}", 0},
                                  {"{\"kind\": \"circle\", \"id\": 7, \"e\": 1, \"pts\": []}", 0},
                                  {"{\"kind\": \"circle\", \"id\": 7, \"e\": 1, \"pts\": [1, 2, 3]}", 0},
                                  {"{\"kind\": \"circle\", \"id\": 7, \"e\": 1, \"pts\": [1], \"extra\": {\"x\": \"s\"}}", 0},
                                  {"{\"kind\": \"circle\", \"id\": 12345678901234567, \"e\": 1, \"pts\": [1]}", 0},
                                  {"{\"kind\": \"circle\", \"r\": 1.12345678901234567, \"id\": 1, \"e\": 1, \"pts\": [1]}", 0},
                                  {"{\"kind\": \"circle\", \"r\": 1e1234, \"id\": 1, \"e\": 1, \"pts\": [1]}", 0},
                                  {NULL, 0}});
    check_schema("definitions", S_DEFS,
                 (const sample[]){{"{\"c\": \"red\"}", 1},
                                  {"{\"c\": \"red\", \"more\": \"green\"}", 1},
                                  {"{\"c\": \"red\", \"more\": null}", 1},
                                  {"{\"c\": \"blue\"}", 0},
                                  {NULL, 0}});
    check_schema("allOf merged", S_ALLOF,
                 (const sample[]){{"{\"a\": \"x\", \"b\": 1}", 1}, {"{\"a\": \"x\"}", 1}, {"{\"b\": 1}", 0}, {NULL, 0}});
    check_schema("additionalProperties true", S_OPEN,
                 (const sample[]){{"{\"a\": 1, \"z\": [true, {\"k\": null}]}", 1},
                                  {"{\"a\": 1}", 1},
                                  {"{\"z\": 1, \"a\": 1}", 0},
                                  {NULL, 0}});
    check_schema("any value", S_ANY,
                 (const sample[]){{"[1, \"a\", {\"b\": [null, false]}, -0.5e-3]", 1},
                                  {"{}", 1},
                                  {"\"s\"", 1},
                                  {"[1,2]", 0},
                                  {"{\"a\":1}", 0},
                                  {NULL, 0}});
    check_schema("plain object", "{\"type\": \"object\"}",
                 (const sample[]){{"{}", 1}, {"{\"a\": 1, \"b\": \"c\"}", 1}, {"[]", 0}, {NULL, 0}});
    check_schema("unsigned integer", "{\"type\": \"integer\", \"minimum\": 0}",
                 (const sample[]){{"0", 1}, {"42", 1}, {"-1", 0}, {"1.0", 0}, {NULL, 0}});
    check_schema("tuple", "{\"type\": \"array\", \"prefixItems\": [{\"type\": \"string\"}, {\"type\": \"boolean\"}]}",
                 (const sample[]){{"[\"a\", true]", 1}, {"[\"a\"]", 0}, {"[true, \"a\"]", 0}, {NULL, 0}});

    char err[256];
    char *t = grammar_json_schema_to_gbnf(NULL, "{\"$ref\": \"#/$defs/missing\"}", "root", err, sizeof err);
    CHECK(!t && strstr(err, "unresolved $ref"), "an unresolved $ref is an error: %s", err);
    t = grammar_json_schema_to_gbnf(NULL, "{\"type\": \"color\"}", "root", err, sizeof err);
    CHECK(!t && strstr(err, "unknown type"), "an unknown type is an error: %s", err);
    t = grammar_json_schema_to_gbnf(NULL, "{\"type\": ", "root", err, sizeof err);
    CHECK(!t && strstr(err, "JSON"), "invalid JSON is an error: %s", err);
    t = grammar_json_schema_to_gbnf(NULL, "{\"type\": \"string\", \"format\": \"email\", \"pattern\": \"^a\"}", "root",
                                    err, sizeof err);
    CHECK(t != NULL, "format and pattern are ignored: %s", err);
    free(t);

    /* several conversions concatenated with hand-written rules */
    char *text = malloc(64);
    if (text) strcpy(text, "root ::= \"call \" (w | z)\n");
    text = grammar_json_schema_to_gbnf(text, S_WEATHER, "w", err, sizeof err);
    char *keep = text;
    text = text ? grammar_json_schema_to_gbnf(text, S_ZOD, "z", err, sizeof err) : NULL;
    CHECK(text != NULL, "two schemas appended to hand rules: %s", err);
    char *bad = text ? grammar_json_schema_to_gbnf(text, "{\"$ref\": \"#/nope\"}", "q", err, sizeof err) : NULL;
    CHECK(!bad && text && !strncmp(text, "root ::=", 8), "a failed conversion leaves the text to the caller");
    grammar *g = text ? grammar_parse(text, "root", err, sizeof err) : NULL;
    CHECK(g && matches(g, "call {\"location\": \"Rome\"}") &&
              matches(g, "call {\"recipe\": {\"name\": \"a\", \"ingredients\": [], \"steps\": []}}") &&
              !matches(g, "call {}"),
          "the combined grammar accepts either schema's JSON: %s", err);
    grammar_free(g);
    free(text ? text : keep);
}

/* ------------------------------------------------------------------ */
/* done / more / forced                                                */

static void test_forced(void) {
    char err[256], buf[64];
    grammar *g = schema_grammar("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"integer\"}},"
                                "\"required\":[\"name\"]}",
                                err, sizeof err);
    CHECK(g != NULL, "one-property schema: %s", err);
    if (!g) return;
    grammar_state *s = grammar_state_new(g);
    size_t n = grammar_state_forced(s, buf, sizeof buf);
    CHECK(n == 9 && !memcmp(buf, "{\"name\": ", 9), "from the start the forced bytes are {\"name\": (got %zu: %.*s)", n, (int)n, buf);
    CHECK(grammar_state_accept(s, "{", 1) == 0, "accept {");
    n = grammar_state_forced(s, buf, sizeof buf);
    CHECK(n == 8 && !memcmp(buf, "\"name\": ", 8), "after { the forced bytes are \"name\": (got %.*s)", (int)n, buf);
    n = grammar_state_forced(s, buf, 3);
    CHECK(n == 3 && !memcmp(buf, "\"na", 3), "forced stops at cap");
    CHECK(!grammar_state_done(s) && grammar_state_more(s), "not done, more");
    CHECK(grammar_state_accept(s, "\"name\": 12x", 11) == -1, "a rejected run returns -1");
    CHECK(grammar_state_accept(s, "\"name\": 12", 10) == 0, "and left the state unchanged");
    n = grammar_state_forced(s, buf, sizeof buf);
    CHECK(n == 0, "inside a number nothing is forced");
    grammar_state *c = grammar_state_clone(s);
    CHECK(c && grammar_state_accept(c, "}", 1) == 0 && grammar_state_done(c) && !grammar_state_more(c) &&
              grammar_state_forced(c, buf, sizeof buf) == 0,
          "after } the clone is done and nothing more may follow");
    CHECK(!grammar_state_done(s), "the original did not move");
    grammar_state_free(c);
    grammar_state_free(s);
    grammar_free(g);

    g = grammar_parse("root ::= \"ab\" \"c\"?\n", "root", err, sizeof err);
    s = g ? grammar_state_new(g) : NULL;
    CHECK(s && grammar_state_accept(s, "ab", 2) == 0 && grammar_state_done(s) && grammar_state_more(s) &&
              grammar_state_forced(s, buf, sizeof buf) == 0,
          "done with an optional continuation: done and more, nothing forced");
    grammar_state_free(s);
    grammar_free(g);
}

/* ------------------------------------------------------------------ */
/* masks against brute force, and random walks                         */

typedef struct {
    int n;
    char **pieces;
    size_t *lens;
    grammar_vocab *v;
} vocab;

static void vocab_free(vocab *t) {
    for (int i = 0; i < t->n; i++) free(t->pieces[i]);
    free(t->pieces);
    free(t->lens);
    grammar_vocab_free(t->v);
}

/* All 256 single bytes, multi-byte pieces crossing JSON structure, two
 * "control" tokens with no piece, and a duplicate piece. */
static int synthetic_vocab(vocab *t) {
    static const char *multi[] = {
        "\": ", "\"}", "},{", "}, {", "\", \"", "{\"", "\"]", "[{\"", "[\"", "true", "null", "false", "12", "0.", "e+",
        "\\n", "\\u00", "\\ud8", "e9", "\"location", "location", "\": \"", "Paris", " \"", ", \"", "\": [", "\xc3\xa9",
        "\xe2\x82", "\xac", "ab\"cd", "celsius", "\"celsius\"}", "name", "\"name\": ", "value", "children", "\": {\"",
        "]}", "}]", "]]", "[[", ", ", "\"\"", "-1", "1.5", "recipe", "ingredients", "steps", "amount", "circle",
        "kind", "\"}]", "two", "{}", "[]", "\"}, {\"", "\"]}", "street", "zip", "address", "tags", "matrix", ": ",
        "12\"", "\\\"", "\\\\", "  ", "\n", "e", "E-", "99999999", "00"};
    int n_multi = (int)(sizeof multi / sizeof *multi);
    t->n = 256 + n_multi + 3;
    t->pieces = calloc((size_t)t->n, sizeof *t->pieces);
    t->lens = calloc((size_t)t->n, sizeof *t->lens);
    if (!t->pieces || !t->lens) return -1;
    for (int i = 0; i < 256; i++) {
        if (!(t->pieces[i] = malloc(1))) return -1;
        t->pieces[i][0] = (char)i;
        t->lens[i] = 1;
    }
    for (int i = 0; i < n_multi; i++) {
        if (!(t->pieces[256 + i] = strdup(multi[i]))) return -1;
        t->lens[256 + i] = strlen(multi[i]);
    }
    /* two control tokens (NULL) then a duplicate of "\": " */
    if (!(t->pieces[t->n - 1] = strdup("\": "))) return -1;
    t->lens[t->n - 1] = 3;
    t->v = grammar_vocab_new(t->n, (const char *const *)t->pieces, t->lens);
    return t->v ? 0 : -1;
}

/* 1 when the mask from S equals grammar_token_ok for every token (ALLOWED: n bytes). */
static int mask_matches_brute(const grammar_state *s, const vocab *t, uint8_t *allowed, int *count) {
    *count = grammar_token_mask(s, t->v, allowed);
    int n = 0;
    for (int i = 0; i < t->n; i++) {
        int ok = grammar_token_ok(s, t->v, i);
        if (ok != allowed[i]) {
            printf("# token %d (%.*s): mask %d, token_ok %d\n", i, (int)t->lens[i], t->pieces[i] ? t->pieces[i] : "",
                   allowed[i], ok);
            return 0;
        }
        n += ok;
    }
    return n == *count;
}

/* Picks an allowed token: at random, or after STEPS > 300 the first allowed
 * of a list of closers (so that walks end). */
static int pick(const vocab *t, const uint8_t *allowed, int count, int steps) {
    static const char *closers[] = {"\"", "]", "}", "0", "null", "\"}", "]}"};
    if (steps > 300)
        for (size_t k = 0; k < sizeof closers / sizeof *closers; k++)
            for (int i = 0; i < t->n; i++)
                if (allowed[i] && t->lens[i] == strlen(closers[k]) && !memcmp(t->pieces[i], closers[k], t->lens[i]))
                    return i;
    int k = (int)(rnd() % (uint32_t)count);
    for (int i = 0; i < t->n; i++)
        if (allowed[i] && k-- == 0) return i;
    return -1;
}

/* Random walks over SCHEMA; each step's mask is checked against brute force. */
static void walks(const char *what, const char *schema, const vocab *t, int n_walks) {
    char err[256];
    grammar *g = schema_grammar(schema, err, sizeof err);
    cJSON *sch = cJSON_Parse(schema);
    uint8_t *allowed = malloc((size_t)t->n);
    int mask_ok = 1, dead_end = 0, invalid = 0, finished = 0, steps_total = 0;
    if (!g || !sch || !allowed) {
        CHECK(0, "%s: setup: %s", what, err);
        goto cleanup;
    }
    for (int w = 0; w < n_walks; w++) {
        grammar_state *s = grammar_state_new(g);
        char text[8192];
        size_t len = 0;
        int steps = 0;
        while (s && len < sizeof text - 64 && steps < 2000) {
            int count;
            if (!mask_matches_brute(s, t, allowed, &count)) mask_ok = 0;
            if (grammar_state_done(s) && (count == 0 || rnd() % 4 == 0)) break;
            if (count == 0) {
                dead_end = 1;
                break;
            }
            int id = pick(t, allowed, count, steps);
            if (grammar_state_accept(s, t->pieces[id], t->lens[id]) != 0) {
                mask_ok = 0;
                break;
            }
            memcpy(text + len, t->pieces[id], t->lens[id]);
            len += t->lens[id];
            steps++;
        }
        steps_total += steps;
        if (s && grammar_state_done(s)) {
            finished++;
            cJSON *v = cJSON_ParseWithLength(text, len);
            if (!v || !validate(v, sch, sch)) {
                if (!invalid) printf("# %s: invalid output: %.*s\n", what, (int)len, text);
                invalid++;
            }
            cJSON_Delete(v);
        }
        grammar_state_free(s);
    }
    CHECK(mask_ok, "%s: every mask equals grammar_token_ok on each token (%d steps)", what, steps_total);
    CHECK(!dead_end, "%s: no walk reached a state with no allowed token before it was done", what);
    CHECK(finished == n_walks, "%s: %d of %d walks finished", what, finished, n_walks);
    CHECK(invalid == 0, "%s: every finished output parses and validates (%d invalid)", what, invalid);
cleanup:
    free(allowed);
    cJSON_Delete(sch);
    grammar_free(g);
}

static void test_masks(void) {
    vocab t = {0};
    if (synthetic_vocab(&t)) {
        CHECK(0, "synthetic vocabulary built");
        vocab_free(&t);
        return;
    }
    walks("weather", S_WEATHER, &t, 40);
    walks("nested", S_NESTED, &t, 25);
    walks("zod", S_ZOD, &t, 25);
    walks("tree", S_TREE, &t, 25);
    walks("misc", S_MISC, &t, 40);
    walks("definitions", S_DEFS, &t, 20);
    walks("allOf", S_ALLOF, &t, 20);
    walks("open object", S_OPEN, &t, 20);
    walks("any value", S_ANY, &t, 25);
    vocab_free(&t);
}

/* ------------------------------------------------------------------ */
/* the Llama 3 vocabulary: masks against token_ok, and their time      */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Appends the bytes of a GPT-2 byte-level token text (UTF-8) to OUT; returns the length. */
static size_t gpt2_bytes(const char *text, char *out) {
    static int unmap[324];
    static int ready;
    if (!ready) { /* GPT-2's bytes_to_unicode, inverted */
        int n = 0;
        for (int b = 0; b < 256; b++) {
            int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
            unmap[printable ? b : 256 + n++] = b;
        }
        ready = 1;
    }
    size_t len = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p;) {
        int cp;
        if (*p < 0x80)
            cp = *p++;
        else if ((*p & 0xe0) == 0xc0) {
            cp = (p[0] & 0x1f) << 6 | (p[1] & 0x3f);
            p += 2;
        } else {
            return 0; /* not a byte-level symbol */
        }
        if (cp >= 324) return 0;
        out[len++] = (char)unmap[cp];
    }
    return len;
}

/* Loads the Llama 3 vocabulary from tokenizer.json (special tokens get no piece). Returns 0 or -1. */
static int llama3_vocab(const char *path, vocab *t) {
    FILE *f = fopen(path, "rb");
    char *json = NULL;
    cJSON *root = NULL;
    int rc = -1;
    long n;
    if (!f) return -1;
    if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) || !(json = malloc((size_t)n + 1)) ||
        fread(json, 1, (size_t)n, f) != (size_t)n)
        goto cleanup;
    json[n] = 0;
    root = cJSON_Parse(json);
    const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "model"), "vocab");
    const cJSON *added = cJSON_GetObjectItem(root, "added_tokens");
    if (!v) goto cleanup;
    t->n = cJSON_GetArraySize(v) + cJSON_GetArraySize(added);
    t->pieces = calloc((size_t)t->n, sizeof *t->pieces);
    t->lens = calloc((size_t)t->n, sizeof *t->lens);
    if (!t->pieces || !t->lens) goto cleanup;
    for (const cJSON *e = v->child; e; e = e->next) {
        int id = e->valueint;
        char buf[1024];
        if (id < 0 || id >= t->n || strlen(e->string) >= sizeof buf) continue;
        size_t len = gpt2_bytes(e->string, buf);
        if (!len || !(t->pieces[id] = malloc(len))) continue;
        memcpy(t->pieces[id], buf, len);
        t->lens[id] = len;
    }
    t->v = grammar_vocab_new(t->n, (const char *const *)t->pieces, t->lens);
    rc = t->v ? 0 : -1;
cleanup:
    cJSON_Delete(root);
    free(json);
    fclose(f);
    return rc;
}

/* Times the mask after PREFIX under SCHEMA and checks it against token_ok. */
static void time_mask(const vocab *t, const char *what, const char *schema, const char *prefix) {
    char err[256];
    grammar *g = schema_grammar(schema, err, sizeof err);
    grammar_state *s = g ? grammar_state_new(g) : NULL;
    uint8_t *allowed = malloc((size_t)t->n);
    if (!s || !allowed || grammar_state_accept(s, prefix, strlen(prefix))) {
        CHECK(0, "llama3 %s: setup (%s)", what, err);
        goto cleanup;
    }
    int count, reps = 20;
    CHECK(mask_matches_brute(s, t, allowed, &count), "llama3 %s: mask equals token_ok on all %d tokens (%d allowed)",
          what, t->n, count);
    double t0 = now();
    for (int i = 0; i < reps; i++) grammar_token_mask(s, t->v, allowed);
    double t1 = now();
    int ok = 0;
    for (int i = 0; i < t->n; i++) ok += grammar_token_ok(s, t->v, i);
    double t2 = now();
    printf("# llama3 %s (after %s): mask %.1f us, token_ok %.3f us per token, %d of %d allowed\n", what, prefix,
           (t1 - t0) / reps * 1e6, (t2 - t1) / t->n * 1e6, ok, t->n);
cleanup:
    free(allowed);
    grammar_state_free(s);
    grammar_free(g);
}

static void test_llama3(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/tokenizers/llama3-bpe/tokenizer.json", check_shared_dir());
    vocab t = {0};
    FILE *f = fopen(path, "rb");
    if (!f) {
        SKIP("no %s: Llama 3 vocabulary masks not checked", path);
        return;
    }
    fclose(f);
    double t0 = now();
    int rc = llama3_vocab(path, &t);
    CHECK(rc == 0, "Llama 3 vocabulary loaded (%d tokens)", t.n);
    if (!rc) {
        double t1 = now();
        printf("# llama3 vocabulary: tokenizer.json read and trie built in %.0f ms\n", (t1 - t0) * 1e3);
        time_mask(&t, "inside a JSON string", S_WEATHER, "{\"location\": \"Par");
        time_mask(&t, "object key", "{\"type\": \"object\"}", "{");
        time_mask(&t, "inside an object key", "{\"type\": \"object\"}", "{\"ke");
        time_mask(&t, "after a required key's forced bytes", S_NESTED, "{\"name\": \"x\", ");
        time_mask(&t, "value start (any JSON)", S_ANY, "[1, ");
        time_mask(&t, "inside a number", S_ANY, "[12");
    }
    vocab_free(&t);
}

int main(void) {
    test_parse_errors();
    test_hand_grammars();
    test_schemas();
    test_forced();
    test_masks();
    test_llama3();
    CHECK_DONE();
}
