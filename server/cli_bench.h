/* cli_bench.h - `ilpd bench`: engine speed against the machine's limits. */
#ifndef ILPD_CLI_BENCH_H
#define ILPD_CLI_BENCH_H

/* Runs `ilpd bench -m MODEL [-t N] [-p 128] [-n 128] [--layer-mask B64]
 * [--kv-f16] [--reps R] [--json]`; argv[0] is "bench". Returns the exit
 * code (0 ok, 1 error, 2 usage). */
int cli_bench(int argc, char **argv);

#endif
