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
/* Parsed command line of a client command; the payload (INPUT/DATA) is read before the
** store is opened, so a refused command leaves no store behind. */
typedef struct {
  const char *pos[3];
  int npos;
  const char *store, *id, *version, *timeout;
  int wait;
  const char *payload; /* INPUT/DATA JSON text, NULL = null */
  char *payload_buf;   /* malloc'd when read from stdin or a file */
  /* management options (manage_cmds.c), as given; checked before the store is opened */
  const char *status, *name, *limit, *after, *created_after, *execution, *completed_before,
      *keep;
  int force, dry_run;
  const char *history; /* sessions --history SESSION_ID */
} dxh_cmdline_t;

/* manage_cmds.c: checks of the management options (exit status or 0), and the commands. */
struct dx_client_s;
int dxh_manage_check(const char *cmd, const dxh_cmdline_t *c);
int dxh_run_list(struct dx_client_s *cl, const dxh_cmdline_t *c);
int dxh_run_describe(struct dx_client_s *cl, const dxh_cmdline_t *c);
int dxh_run_history(struct dx_client_s *cl, const dxh_cmdline_t *c);
int dxh_run_executions(struct dx_client_s *cl, const dxh_cmdline_t *c);
int dxh_run_delete(struct dx_client_s *cl, const dxh_cmdline_t *c);
int dxh_run_purge(struct dx_client_s *cl, const dxh_cmdline_t *c);
int dxh_run_prune(struct dx_client_s *cl, const dxh_cmdline_t *c);
int dxh_run_terminate(struct dx_client_s *cl, const dxh_cmdline_t *c);
/* Exit status of a failed client call: bad input is usage (2), the rest a failure (1). */
int dxh_client_fail(int code, const char *msg);
/* One JSON value per line on stdout (takes the text, frees it). */
void dxh_put(char *json);

/* The store directory: explicit, else $DUROXIDE_STORE, else ./duroxide-data. */
const char *dxh_store_dir(const char *explicit_dir);
#endif
