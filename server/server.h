/* server.h - `ilpd serve`: the Messages API over HTTP (README, "The server"). */
#ifndef ILPD_SERVER_H
#define ILPD_SERVER_H

/* Runs the server until SIGTERM/SIGINT; ARGV[0] is "serve". Returns the
 * process exit code (0 after a clean shutdown, 1 when the model or the
 * configuration cannot be loaded, 2 for usage errors). */
int server_main(int argc, char **argv);

#endif
