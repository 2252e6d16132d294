/*
 * yaml_plain.h - which strings kubectl -o yaml quotes: those go-yaml v2
 * would read back as something else than a string when written plain.
 *
 * kubectl writes YAML with sigs.k8s.io/yaml, that is go-yaml v2, whose
 * encoder quotes a string when resolve() (yaml.v2 resolve.go) reads it as
 * null, a boolean, a number or a timestamp, or when it is a base-60 float
 * (1:20). resolve() looks only at strings whose first character hints at
 * such a value: a sign or a digit (an integer by strconv.ParseInt/ParseUint
 * with base 0, a float matching yamlStyleFloat, a timestamp time.Parse
 * accepts), a '.' (a float by strconv.ParseFloat), or one of yYnNtTfFoO~
 * (the words of its map). So "." "<<" "0x1p-2" "2026-02-30" "1.5e999" stay
 * plain, and "1_000" ".5" "0o17" "2026-1-2" are quoted.
 */
#ifndef KLUA_YAML_PLAIN_H
#define KLUA_YAML_PLAIN_H

/* Whether go-yaml v2 reads the NUL-terminated s, written plain, as
 * something else than the string s. */
int kl_yaml_plain_not_string(const char *s);

#endif
