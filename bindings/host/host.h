/* host.h -- pieces shared by the duroxide-lua program's files (internal). */
#ifndef DX_HOST_H
#define DX_HOST_H
#include <stdio.h>

int dxh_usage(FILE *f);
/* Print "duroxide-lua: <fmt with detail>" to stderr; returns code. */
int dxh_fail(int code, const char *fmt, const char *detail);
int dxh_is_command(const char *word);
/* Run a client command; argv[0] is the command word. Returns the exit status. */
int dxh_command(int argc, char **argv);
/* Split "--name value" or "--name=value" at argv[*i] (advancing *i past a separate value).
** name receives the option name without dashes. 0; -1 when the value is missing; -2 when it
** starts with "--" (a forgotten value: "--id --wait"). */
int dxh_split_opt(int argc, char **argv, int *i, char *name, size_t len, const char **val);
/* Report dxh_split_opt's failure rc for option text opt (val: the refused value); returns 2. */
int dxh_opt_error(const char *opt, int rc, const char *val);
/* The store directory: explicit, else $DUROXIDE_STORE, else ./duroxide-data. */
const char *dxh_store_dir(const char *explicit_dir);
#endif
