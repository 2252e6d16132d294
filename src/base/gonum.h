/*
 * gonum.h - a float64 written as Go writes it, so that klua's output is
 * kubectl's byte for byte and a number the API server sent reads back to
 * the same text.
 *
 * kube-apiserver and kubectl hold every JSON number as an int64 or a
 * float64 (sigs.k8s.io/json), and write a float64 with Go's shortest
 * digits that read back to it: encoding/json in 'f' notation unless it is
 * below 1e-6 or from 1e21 on (12345678901234567000, 0.1, 1e-7, 1e+21),
 * strconv's 'g' (fmt's %v, go-yaml) in 'e' notation from an exponent of 6
 * or below -4 (1.2345678901234567e+19, 1e+06, 1e-07). A number the server
 * sent is therefore the encoding/json text of the double Lua reads it as,
 * and kl_gonum_json gives that text back.
 */
#ifndef KLUA_GONUM_H
#define KLUA_GONUM_H

#include <stddef.h>

/* Longer than the longest text, "-0.0000012345678901234567" and its NUL. */
#define KL_GONUM_MAX 32

/* d (finite) as Go's encoding/json writes a float64; returns the length. */
size_t kl_gonum_json(double d, char out[KL_GONUM_MAX]);
/* d (finite) as strconv.FormatFloat(d, 'g', -1, 64) writes it, which is
 * fmt's %v of a float64 and go-yaml's float; returns the length. */
size_t kl_gonum_g(double d, char out[KL_GONUM_MAX]);

#endif
