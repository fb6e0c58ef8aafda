/* cli_probe.h - `ilpd calibrate` (fit a probe) and `ilpd eval` (measure it). */
#ifndef ILPD_CLI_PROBE_H
#define ILPD_CLI_PROBE_H

/* Each returns the process exit code. */
int cli_calibrate(int argc, char **argv);
int cli_eval(int argc, char **argv);

#endif
