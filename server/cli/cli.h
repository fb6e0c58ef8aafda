/* cli.h - the command-line tools: generate, tokenize, inspect, logits
 * (cli.c), bench (bench.c), calibrate (calibrate.c) and eval (eval.c).
 * `ilpd serve` is the server (server/server.h).
 *
 * Each command takes ARGV[0] = "ilpd" and ARGV[1] = its name, prints its
 * result on stdout and logs on stderr, and returns the process exit code:
 * 0 ok (and for -h/--help, which prints its usage on stdout), 1 error,
 * 2 usage error (its usage on stderr). */
#ifndef ILPD_CLI_H
#define ILPD_CLI_H

#include <stddef.h>
#include <stdio.h>

#include "engine/engine.h"

/* Runs `ilpd COMMAND ...` for the tools; returns the exit code. */
int cli_main(int argc, char **argv);

int cli_bench(int argc, char **argv);
int cli_calibrate(int argc, char **argv);
int cli_eval(int argc, char **argv);

/* The synopsis lines of each command, "  ilpd NAME ..." (static). */
extern const char cli_bench_usage[], cli_calibrate_usage[], cli_eval_usage[];

/* 1 when ARG asks for help (-h or --help), else 0. */
int cli_is_help(const char *arg);

/* --device's value (auto, cpu, cuda) into *D. Returns 0, or -1 (with a
 * message) for anything else. */
int cli_device_parse(const char *v, engine_device *d);

/* Prints "usage:" and USAGE: on stdout when HELP (returns 0), else on
 * stderr (returns 2, the exit code of a usage error). */
int cli_usage_print(const char *usage, int help);

/* The whole file at PATH (at most MAX bytes are read) as a malloc'd
 * NUL-terminated string (the caller frees it), or NULL. */
char *cli_read_file(const char *path, size_t max);

/* Seconds on the monotonic clock. */
double cli_now_s(void);

#endif
