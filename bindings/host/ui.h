/* ui.h -- the web console (`duroxide-lua ui`): state shared by ui.c and ui_api.c (internal). */
#ifndef DX_HOST_UI_H
#define DX_HOST_UI_H

#include <jansson.h>

#include "duroxide.h"
#include "http.h"

/* How many samples the console keeps for its charts (one every DXH_UI_SAMPLE_MS). */
#define DXH_UI_SAMPLES 300
#define DXH_UI_SAMPLE_MS 2000
/* How many stored session ownership changes the sessions page shows (the newest). */
#define DXH_UI_MOVES 200

typedef struct dxh_ui_s {
  dx_client_t *cl;
  const char *store;
  const char *token;  /* NULL: no token asked */
  int read_only;
  int allow_remote;
  json_t *samples;    /* array of {t, ...} objects, oldest first */
} dxh_ui_t;

/* Answer an /api/ request (the caller checked the token and the Host header). */
void dxh_ui_api(dxh_ui_t *u, dxh_req_t *r);
/* Take one sample for the charts (the timer's job). */
void dxh_ui_sample(dxh_ui_t *u);
/* The `ui` command; argv[0] is "ui". Returns the exit status. */
int dxh_ui(int argc, char **argv);

#endif
