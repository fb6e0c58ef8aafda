/* main.c - the ilpd program: `ilpd serve ...` runs the server, every other
 * command is a command-line tool. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "server/cli/cli.h"
#include "server/server.h"

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "serve")) {
        /* The server prints its usage on stderr, with a usage error; asked
         * for (`ilpd serve --help`), the usage is the answer: stdout. */
        if (argc >= 3 && cli_is_help(argv[2]) && (fflush(stderr) || dup2(STDOUT_FILENO, STDERR_FILENO) < 0)) return 1;
        return server_main(argc - 1, argv + 1);
    }
    return cli_main(argc, argv);
}
