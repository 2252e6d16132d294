/* main.c - the klua command line: dispatches to the subcommands. */
#include <curl/curl.h>
#include <lua.h>
#include <stdio.h>
#include <string.h>

#include "version.h"

static int cmd_version(void) {
    printf("klua %s\n%s\nlibcurl %s\n", KLUA_VERSION, LUA_RELEASE, curl_version_info(CURLVERSION_NOW)->version);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "version") == 0) return cmd_version();
    fprintf(stderr, "usage: klua version\n");
    return 2;
}
