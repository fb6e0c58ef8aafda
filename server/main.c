/* main.c - the ilpd program: `ilpd serve ...` runs the server, every other
 * command is a command-line tool. */
#include <string.h>

#include "server/cli.h"
#include "server/server.h"

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "serve")) return server_main(argc - 1, argv + 1);
    return cli_main(argc, argv);
}
