/* complete.c - shell completion: `klua completion SHELL` and `klua
 * __complete WORDS...`; see complete.h. */
#include "cli/complete.h"

#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "lua/runtime.h"

/* ---- what the help says ---------------------------------------------------- */

#define MAX_WORDS 128

/* The flags and commands of one help text, read off its layout (cli.h):
 * a flag line is "  -s, --long ARG" or "      --long ARG" padded to 40
 * columns, a command line under "Commands:" starts with the command's
 * name. The strings point into text, which this owns. */
typedef struct help_words {
    char *text;
    size_t nflags, ncommands;
    const char *longs[MAX_WORDS], *shorts[MAX_WORDS], *args[MAX_WORDS];
    const char *commands[MAX_WORDS];
} help_words;

/* Cuts a flag line's left column ("-v, --v N") into its names and argument. */
static void read_flag(help_words *h, char *left) {
    if (h->nflags == MAX_WORDS) return;
    const char *lng = NULL, *shrt = NULL, *arg = NULL;
    char *save;
    for (char *tok = strtok_r(left, " ,", &save); tok; tok = strtok_r(NULL, " ,", &save)) {
        if (tok[0] != '-') arg = tok;
        else if (tok[1] == '-' && !lng) lng = tok;
        else if (!shrt) shrt = tok;
    }
    h->longs[h->nflags] = lng ? lng : shrt;
    h->shorts[h->nflags] = lng ? shrt : NULL;
    h->args[h->nflags++] = arg;
}

static void read_line(help_words *h, char *line, int in_commands) {
    if (strncmp(line, "  ", 2)) return;
    char *left = line + 2;
    if (strlen(left) > 38) left[38] = '\0';
    if (left[strspn(left, " ")] == '-') {
        read_flag(h, left);
    } else if (in_commands && left[0] != ' ' && h->ncommands < MAX_WORDS) {
        left[strcspn(left, " ")] = '\0';
        h->commands[h->ncommands++] = left;
    }
}

static void help_words_free(help_words *h) {
    free(h->text);
    h->text = NULL;
}

/* Reads the help of command (klua's own when NULL): 0, or -1 without one. */
static int help_words_load(help_words *h, const char *command) {
    memset(h, 0, sizeof *h);
    size_t len;
    FILE *out = open_memstream(&h->text, &len), *errs = fopen("/dev/null", "w");
    int code = out && errs ? kl_cli_help(command, out, errs) : 1;
    if (errs) fclose(errs);
    if (out) fclose(out);
    if (code || !h->text) {
        help_words_free(h);
        return -1;
    }
    int in_commands = 0;
    for (char *line = h->text, *end; *line; line = end + 1) {
        end = strchr(line, '\n');
        if (!end) end = line + strlen(line) - 1;
        else *end = '\0';
        if (line[0] && line[0] != ' ') in_commands = !strcmp(line, "Commands:");
        else read_line(h, line, in_commands);
    }
    return 0;
}

/* The index of the flag a word names (the part before any '='), or -1. */
static int find_flag(const help_words *h, const char *word) {
    size_t len = strcspn(word, "=");
    for (size_t k = 0; k < h->nflags; k++) {
        const char *l = h->longs[k], *s = h->shorts[k];
        if ((strlen(l) == len && !strncmp(l, word, len)) || (s && strlen(s) == len && !strncmp(s, word, len)))
            return (int)k;
    }
    return -1;
}

/* ---- the scripts ----------------------------------------------------------- */

/* Each script hands the words up to the cursor to `klua __complete` (the
 * same klua the user typed, so kubectl-klua and a klua off PATH complete
 * alike) and offers its lines; the last line is the directive. */
static const char bash_script[] =
    "# bash completion for klua, made by `klua completion bash`.\n"
    "_klua() {\n"
    "    local cur words cword\n"
    "    if declare -F _get_comp_words_by_ref >/dev/null; then\n"
    "        _get_comp_words_by_ref -n =: cur words cword\n"
    "    else\n"
    "        cur=${COMP_WORDS[COMP_CWORD]} cword=$COMP_CWORD\n"
    "        words=(\"${COMP_WORDS[@]}\")\n"
    "    fi\n"
    "    local out line directive\n"
    "    out=$(\"${words[0]}\" __complete \"${words[@]:1:cword}\" 2>/dev/null) || return 0\n"
    "    directive=${out##*:}\n"
    "    out=${out%:*}\n"
    "    COMPREPLY=()\n"
    "    while IFS= read -r line; do\n"
    "        [[ -n $line ]] && COMPREPLY+=(\"$line\")\n"
    "    done <<< \"$out\"\n"
    "    # readline replaces only what follows the '=' of --flag=value.\n"
    "    if [[ $cur == -*=* && $COMP_WORDBREAKS == *=* ]]; then\n"
    "        COMPREPLY=(\"${COMPREPLY[@]#\"${cur%%=*}=\"}\")\n"
    "    fi\n"
    "    if [[ ${#COMPREPLY[@]} -eq 0 && $directive == 0 ]]; then\n"
    "        compopt -o filenames 2>/dev/null\n"
    "        while IFS= read -r line; do COMPREPLY+=(\"$line\"); done < <(compgen -f -- \"$cur\")\n"
    "    fi\n"
    "    return 0\n"
    "}\n"
    "complete -F _klua klua kubectl-klua\n";

static const char zsh_script[] =
    "#compdef klua kubectl-klua\n"
    "# zsh completion for klua, made by `klua completion zsh`.\n"
    "_klua() {\n"
    "    local -a lines candidates\n"
    "    local directive\n"
    "    lines=(\"${(@f)$(\"${words[1]}\" __complete \"${(@)words[2,CURRENT]}\" 2>/dev/null)}\")\n"
    "    directive=${lines[-1]#:}\n"
    "    candidates=(\"${(@)lines[1,-2]}\")\n"
    "    if (( ${#candidates} )); then\n"
    "        compadd -- \"${(@)candidates}\"\n"
    "    elif [[ $directive == 0 ]]; then\n"
    "        _files\n"
    "    fi\n"
    "}\n"
    "if [[ ${funcstack[1]} == _klua ]]; then\n"
    "    _klua \"$@\"\n"
    "else\n"
    "    compdef _klua klua kubectl-klua\n"
    "fi\n";

static const char fish_script[] =
    "# fish completion for klua, made by `klua completion fish`.\n"
    "function __klua_complete\n"
    "    set -l tokens (commandline -opc)\n"
    "    set -l cur (commandline -ct)\n"
    "    set -l out ($tokens[1] __complete $tokens[2..-1] \"$cur\" 2>/dev/null)\n"
    "    test (count $out) -gt 0; or return\n"
    "    set -l directive (string replace -r '^:' '' -- $out[-1])\n"
    "    set -e out[-1]\n"
    "    if test (count $out) -gt 0\n"
    "        printf '%s\\n' $out\n"
    "    else if test \"$directive\" = 0\n"
    "        __fish_complete_path \"$cur\"\n"
    "    end\n"
    "end\n"
    "complete -c klua -f -a '(__klua_complete)'\n"
    "complete -c kubectl-klua -f -a '(__klua_complete)'\n";

/* The shells `klua completion` knows. */
static const struct {
    const char *name, *script;
} shells[] = {{"bash", bash_script}, {"zsh", zsh_script}, {"fish", fish_script}};
#define NSHELLS (sizeof shells / sizeof shells[0])

/* ---- answers --------------------------------------------------------------- */


/* How the shell goes on after the candidates, the last line of the answer
 * as ":N" (kubectl's __complete writes the same): with DEFAULT it completes
 * file names when no candidate matched, with NO_FILES never. */
enum { DIRECTIVE_DEFAULT = 0, DIRECTIVE_NO_FILES = 4 };

static void offer(FILE *out, const char *prefix, const char *cur, const char *word, size_t len) {
    if (strlen(cur) <= len && !strncmp(word, cur, strlen(cur))) fprintf(out, "%s%.*s\n", prefix, (int)len, word);
}

/* Each word of "text|json" that begins with cur. */
static int offer_choices(FILE *out, const char *prefix, const char *cur, const char *arg) {
    if (!strchr(arg, '|')) return 0;
    for (const char *w = arg; *w; w += strcspn(w, "|"), w += *w == '|') offer(out, prefix, cur, w, strcspn(w, "|"));
    return 1;
}

static void offer_flags(FILE *out, const help_words *h, const char *cur) {
    for (size_t k = 0; k < h->nflags; k++) {
        if (h->shorts[k]) offer(out, "", cur, h->shorts[k], strlen(h->shorts[k]));
        /* -v's alias --v is no name anyone types. */
        if (!h->shorts[k] || strlen(h->longs[k]) > 3) offer(out, "", cur, h->longs[k], strlen(h->longs[k]));
    }
}

/* Asks the server, through the connection the first nwords words describe
 * (their --kubeconfig, --context, --server...), for its names of what
 * ("resources", "namespaces", or "objects" of type kind in namespace ns:
 * lua/klua/cmd/complete.lua) that begin with cur, each after prefix
 * (the "--namespace=" of a word that holds it); the chunk writes them
 * to stdout, which out is. Anything that fails writes nothing: stderr goes
 * to /dev/null first, since completion must not write over the command
 * line being edited. */
static void offer_from_server(FILE *out, int nwords, char **argv, const char *what, const char *prefix,
                              const char *cur, const char *kind, const char *ns) {
    fflush(out);
    if (!freopen("/dev/null", "w", stderr)) return;
    char **words = calloc((size_t)nwords + 2, sizeof *words);
    if (!words) return;
    words[0] = "klua";
    memcpy(words + 1, argv, (size_t)nwords * sizeof *words);
    kl_cli c;
    if (kl_cli_parse(&c, nwords + 1, words, stderr) == 0) {
        /* A server that does not answer must not hang the shell. */
        if (c.rt.request_timeout <= 0) c.rt.request_timeout = 5;
        char err[256];
        kl_rt *rt = kl_rt_new(&c.rt, err, sizeof err);
        if (rt) {
            char *args[5] = {(char *)what, (char *)prefix, (char *)cur, (char *)kind, (char *)ns};
            kl_rt_run(rt, "klua __complete", "return require('klua.cmd.complete').main(...)", 5, args);
            kl_rt_free(rt);
        }
    }
    fflush(stdout);
    kl_cli_free(&c);
    free(words);
}

typedef struct {
    FILE *out;
    const char *prefix, *cur;
} offering;

static void offer_format(void *ud, const char *word, size_t len) {
    offering *o = ud;
    offer(o->out, o->prefix, o->cur, word, len);
}

/* What the word cur, the value of a flag that takes arg, may be; the
 * directive. The connection comes from the first nwords words. */
static int complete_value(FILE *out, int nwords, char **argv, const char *prefix, const char *arg, const char *cur) {
    if (offer_choices(out, prefix, cur, arg)) return DIRECTIVE_NO_FILES;
    if (!strcmp(arg, "FORMAT")) {
        offering o = {out, prefix, cur};
        kl_cli_watch_formats(offer_format, &o);
        return DIRECTIVE_NO_FILES;
    }
    if (!strcmp(arg, "FILE")) return DIRECTIVE_DEFAULT;
    if (!strcmp(arg, "NS")) offer_from_server(out, nwords, argv, "namespaces", prefix, cur, "", "");
    return DIRECTIVE_NO_FILES;
}

/* Where a line stands before its last word: the command, whether that word
 * is the value of a flag, how many plain words the command has. */
typedef struct line_state {
    const char *command;
    const char *first; /* the command's first word that is not a flag */
    const char *ns;    /* the namespace a flag named: "" none, "*" all (-A) */
    int value_of;      /* the flag whose value the last word is, or -1 */
    int words;         /* the command's words that are not flags */
    int rest;          /* the rest of the line is a script's or busted's */
} line_state;

#define LINE_START ((line_state){NULL, NULL, "", -1, 0, 0})

/* Notes the namespace a flag word names (watch's -n NS, --namespace=NS, -A). */
static void note_namespace(line_state *st, const help_words *h, int k, const char *word, const char *next) {
    const char *eq = strchr(word, '=');
    if (!strcmp(h->longs[k], "--all-namespaces")) st->ns = "*";
    else if (!strcmp(h->longs[k], "--namespace") && (eq || next)) st->ns = eq ? eq + 1 : next;
}

static void walk(line_state *st, const help_words *h, int n, char **w) {
    for (int i = 0; i < n && !st->rest; i++) {
        int k = w[i][0] == '-' && w[i][1] ? find_flag(h, w[i]) : -1;
        if (k >= 0) note_namespace(st, h, k, w[i], i + 1 < n ? w[i + 1] : NULL);
        if (k >= 0 && h->args[k] && !strchr(w[i], '=')) {
            if (i + 1 == n) st->value_of = k;
            i++;
        } else if (w[i][0] == '-' && w[i][1]) {
            continue;
        } else if (!st->command) {
            st->command = w[i];
            st->rest = !strcmp(w[i], "test");
        } else {
            if (!st->words++) st->first = w[i];
            st->rest = !strcmp(st->command, "run");
        }
    }
}

static int complete(FILE *out, int argc, char **argv) {
    const char *cur = argv[argc - 1];
    help_words global, own;
    if (help_words_load(&global, NULL) < 0) return DIRECTIVE_DEFAULT;
    line_state st = LINE_START;
    walk(&st, &global, argc - 1, argv);
    /* Past the command the flags are its own help's (watch's, then the
     * global ones), so the words are walked again with those. */
    const help_words *h = &global;
    if (st.command && help_words_load(&own, st.command) == 0) {
        h = &own;
        st = LINE_START;
        walk(&st, h, argc - 1, argv);
    } else {
        own.text = NULL;
    }
    int directive = DIRECTIVE_NO_FILES;
    const char *eq = cur[0] == '-' ? strchr(cur, '=') : NULL;
    int k = eq ? find_flag(h, cur) : -1;
    if (st.rest) {
        directive = DIRECTIVE_DEFAULT;
    } else if (st.value_of >= 0) {
        directive = complete_value(out, argc - 2, argv, "", h->args[st.value_of], cur);
    } else if (k >= 0 && h->args[k]) {
        char prefix[128];
        snprintf(prefix, sizeof prefix, "%.*s", (int)(eq - cur + 1), cur);
        directive = complete_value(out, argc - 1, argv, prefix, h->args[k], eq + 1);
    } else if (cur[0] == '-') {
        offer_flags(out, h, cur);
    } else if (!st.command || !strcmp(st.command, "help")) {
        for (size_t c = 0; c < global.ncommands && (!st.command || !st.words); c++)
            offer(out, "", cur, global.commands[c], strlen(global.commands[c]));
    } else if (!strcmp(st.command, "completion") && !st.words) {
        for (size_t sh = 0; sh < NSHELLS; sh++) offer(out, "", cur, shells[sh].name, strlen(shells[sh].name));
    } else if (!strcmp(st.command, "run") || (!strcmp(st.command, "replay") && !st.words)) {
        directive = DIRECTIVE_DEFAULT;
    } else if ((!strcmp(st.command, "watch") || !strcmp(st.command, "record")) && !st.words) {
        offer_from_server(out, argc - 1, argv, "resources", "", cur, "", "");
    } else if (!strcmp(st.command, "watch") && st.words == 1 && !strpbrk(st.first, ",/")) {
        /* klua watch TYPE NAME: one type's objects, as kubectl get TYPE <TAB>. */
        offer_from_server(out, argc - 1, argv, "objects", "", cur, st.first, st.ns);
    }
    help_words_free(&own);
    help_words_free(&global);
    return directive;
}

int kl_complete_words(int argc, char **argv) {
    char *empty[1] = {""};
    if (argc < 1) argc = 1, argv = empty;
    int directive = complete(stdout, argc, argv);
    printf(":%d\n", directive);
    return 0;
}

int kl_complete_script(const char *shell, FILE *out, FILE *errs) {
    for (size_t k = 0; shell && k < NSHELLS; k++) {
        if (!strcmp(shell, shells[k].name)) {
            fputs(shells[k].script, out);
            return 0;
        }
    }
    if (shell) fprintf(errs, "klua completion: unknown shell \"%s\": use bash, zsh or fish\n", shell);
    else fputs("klua completion: name a shell: bash, zsh or fish\n", errs);
    return 2;
}
