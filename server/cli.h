/* cli.h - the command-line tools (generate, tokenize, inspect, logits). */
#ifndef ILPD_CLI_H
#define ILPD_CLI_H

/* Runs `ilpd COMMAND ...` for the tools; returns the exit code. */
int cli_main(int argc, char **argv);

#endif
