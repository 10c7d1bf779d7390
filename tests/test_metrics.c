/*
** test_metrics.c -- the metrics registry (core/src/metrics.c) and its renderings: counters,
** gauges and histograms; the Prometheus text exposition format with hostile label values;
** the series cap; JSON that parses back.
*/
#include <jansson.h>

#include "metrics.h"
#include "testlib.h"

/* The value of the sample line for `series` (name{labels}) in Prometheus text, or NULL. */
static const char *sample(const char *text, const char *series) {
  static char v[64];
  const char *p = text;
  size_t n = strlen(series);
  while ((p = strstr(p, series)) != NULL) {
    if ((p == text || p[-1] == '\n') && p[n] == ' ') {
      snprintf(v, sizeof v, "%.*s", (int)strcspn(p + n + 1, "\n"), p + n + 1);
      return v;
    }
    p += n;
  }
  return NULL;
}

DX_TEST(counters_and_gauges_render_in_prometheus_text) {
  dx_metrics_t *m = dx__metrics_new();
  char *t;
  dx__metric_add(m, DXM_ORCH_STARTS, DXM_LABELS("Hello", "1.0.0", "client"), 1);
  dx__metric_add(m, DXM_ORCH_STARTS, DXM_LABELS("Hello", "1.0.0", "client"), 2);
  dx__metric_add(m, DXM_ORCH_STARTS, DXM_LABELS("Other", "", "continueAsNew"), 1);
  dx__metric_set(m, DXM_SESS_OWNED, DXM_NOLABELS, 4);
  dx__metric_set(m, DXM_SESS_OWNED, DXM_NOLABELS, 2);
  dx__metric_add(m, DXM_STORE_CYCLES, DXM_LABELS("ok"), -5); /* counters never go down */
  t = dx_metrics_render_prometheus(m);
  ASSERT(t);
  ASSERT_CONTAINS(t, "# TYPE duroxide_orchestration_starts_total counter\n");
  ASSERT_CONTAINS(t, "# HELP duroxide_orchestration_starts_total ");
  ASSERT_STR_EQ(sample(t, "duroxide_orchestration_starts_total{orchestration_name=\"Hello\","
                       "version=\"1.0.0\",initiated_by=\"client\"}"), "3");
  ASSERT(sample(t, "duroxide_orchestration_starts_total{orchestration_name=\"Other\","
                   "version=\"\",initiated_by=\"continueAsNew\"}"));
  ASSERT_CONTAINS(t, "\nduroxide_sessions_owned 2\n");
  ASSERT_CONTAINS(t, "\nduroxide_store_cycles_total{result=\"ok\"} 0\n");
  /* a metric without labels shows at zero before anything is recorded */
  ASSERT_CONTAINS(t, "\nduroxide_session_moves_total 0\n");
  ASSERT_EQ(dx__metric_sum(m, DXM_ORCH_STARTS), 4);
  free(t);
  dx__metrics_free(m);
}

DX_TEST(histograms_have_cumulative_buckets_sum_and_count) {
  dx_metrics_t *m = dx__metrics_new();
  char *t;
  dx__metric_observe(m, DXM_ACT_DURATION, DXM_LABELS("Fetch"), 0.003);
  dx__metric_observe(m, DXM_ACT_DURATION, DXM_LABELS("Fetch"), 0.2);
  dx__metric_observe(m, DXM_ACT_DURATION, DXM_LABELS("Fetch"), 1000);
  t = dx_metrics_render_prometheus(m);
  ASSERT_CONTAINS(t, "# TYPE duroxide_activity_duration_seconds histogram\n");
  ASSERT_CONTAINS(t, "duroxide_activity_duration_seconds_bucket{activity_name=\"Fetch\","
                     "le=\"0.001\"} 0\n");
  ASSERT_CONTAINS(t, "duroxide_activity_duration_seconds_bucket{activity_name=\"Fetch\","
                     "le=\"0.005\"} 1\n");
  ASSERT_CONTAINS(t, "duroxide_activity_duration_seconds_bucket{activity_name=\"Fetch\","
                     "le=\"0.25\"} 2\n");
  ASSERT_CONTAINS(t, "duroxide_activity_duration_seconds_bucket{activity_name=\"Fetch\","
                     "le=\"120\"} 2\n");
  ASSERT_CONTAINS(t, "duroxide_activity_duration_seconds_bucket{activity_name=\"Fetch\","
                     "le=\"+Inf\"} 3\n");
  ASSERT_CONTAINS(t, "duroxide_activity_duration_seconds_sum{activity_name=\"Fetch\"} 1000.203\n");
  ASSERT_CONTAINS(t, "duroxide_activity_duration_seconds_count{activity_name=\"Fetch\"} 3\n");
  /* an unlabelled histogram shows empty */
  ASSERT_CONTAINS(t, "\nduroxide_store_cycle_duration_seconds_count 0\n");
  ASSERT_EQ(dx__metric_sum(m, DXM_ACT_DURATION), 3);
  free(t);
  dx__metrics_free(m);
}

DX_TEST(hostile_label_values_are_escaped_and_made_utf8) {
  dx_metrics_t *m = dx__metrics_new();
  char *t, *j, longname[400];
  json_error_t je;
  json_t *root;
  memset(longname, 'x', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  dx__metric_add(m, DXM_ACT_EXECUTIONS, DXM_LABELS("a\"b\\c\nd} 99\n# forged", "success"), 1);
  dx__metric_add(m, DXM_ACT_EXECUTIONS, DXM_LABELS("bad\xff\xfeutf8", "success"), 1);
  dx__metric_add(m, DXM_ACT_EXECUTIONS, DXM_LABELS("bad\xff\xfeutf8", "success"), 1);
  dx__metric_add(m, DXM_ACT_EXECUTIONS, DXM_LABELS(longname, NULL), 1);
  t = dx_metrics_render_prometheus(m);
  ASSERT_CONTAINS(t, "duroxide_activity_executions_total{activity_name=\"a\\\"b\\\\c\\nd} 99"
                     "\\n# forged\",outcome=\"success\"} 1\n");
  /* the two recordings with the same bad bytes are one series, with U+FFFD for each byte */
  ASSERT_CONTAINS(t, "{activity_name=\"bad\xef\xbf\xbd\xef\xbf\xbdutf8\",outcome=\"success\"} 2\n");
  ASSERT(!strstr(t, "\n# forged")); /* no line of its own */
  /* values are cut at 200 bytes; NULL reads as "" */
  {
    char want[300];
    snprintf(want, sizeof want, "{activity_name=\"%.200s\",outcome=\"\"} 1\n", longname);
    ASSERT_CONTAINS(t, want);
  }
  j = dx_metrics_render_json(m);
  root = json_loads(j, 0, &je);
  ASSERT(root);
  ASSERT_EQ(json_array_size(json_object_get(
                json_object_get(root, "duroxide_activity_executions_total"), "series")), 3);
  json_decref(root);
  free(j);
  free(t);
  dx__metrics_free(m);
}

DX_TEST(series_past_the_cap_are_counted_under_overflow) {
  dx_metrics_t *m = dx__metrics_new();
  char name[32], *t;
  int i;
  for (i = 0; i < 1005; i++) {
    snprintf(name, sizeof name, "act%d", i);
    dx__metric_add(m, DXM_ACT_EXECUTIONS, DXM_LABELS(name, "success"), 1);
  }
  t = dx_metrics_render_prometheus(m);
  ASSERT_CONTAINS(t, "{activity_name=\"act999\",outcome=\"success\"} 1\n");
  ASSERT(!strstr(t, "act1000"));
  ASSERT_CONTAINS(t, "{activity_name=\"_overflow\",outcome=\"_overflow\"} 5\n");
  ASSERT_EQ(dx__metric_sum(m, DXM_ACT_EXECUTIONS), 1005);
  free(t);
  dx__metrics_free(m);
}

DX_TEST(json_rendering_parses_back_with_every_metric) {
  dx_metrics_t *m = dx__metrics_new();
  json_t *root, *fam;
  json_error_t je;
  char *j;
  dx__metric_add(m, DXM_SESS_RELEASES, DXM_LABELS("idle"), 2);
  dx__metric_observe(m, DXM_STORE_COMMIT_DURATION, DXM_LABELS("true"), 0.01);
  j = dx_metrics_render_json(m);
  ASSERT(j);
  root = json_loads(j, 0, &je);
  ASSERT(root);
  ASSERT_EQ(json_object_size(root), DXM__COUNT);
  fam = json_object_get(root, "duroxide_session_releases_total");
  ASSERT_STR_EQ(json_string_value(json_object_get(fam, "type")), "counter");
  ASSERT_EQ(json_integer_value(json_object_get(json_array_get(json_object_get(fam, "series"),
                                                              0), "value")), 2);
  fam = json_object_get(root, "duroxide_store_commit_duration_seconds");
  ASSERT_EQ(json_integer_value(json_object_get(json_array_get(json_object_get(fam, "series"),
                                                              0), "count")), 1);
  json_decref(root);
  free(j);
  ASSERT(!dx_metrics_render_json(NULL));
  ASSERT(!dx_metrics_render_prometheus(NULL));
  dx__metric_add(NULL, DXM_SESS_MOVES, DXM_NOLABELS, 1); /* ignored */
  dx__metrics_free(m);
}

/* The registry remembers the series it found last (metrics.c family_t.last): alternating
** labels, labels equal but for the last one, and labels stored in a fixed form (too long,
** bad UTF-8) each land in their own series. */
DX_TEST(alternating_and_fixed_labels_keep_their_own_series) {
  dx_metrics_t *m = dx__metrics_new();
  char longa[300], longb[300];
  char *t;
  memset(longa, 'a', sizeof longa - 1);
  longa[sizeof longa - 1] = '\0';
  memcpy(longb, longa, sizeof longb);
  longb[sizeof longb - 2] = 'b'; /* differs only past the stored length: the same series */
  dx__metric_add(m, DXM_ORCH_STARTS, DXM_LABELS("A", "1.0.0", "client"), 1);
  dx__metric_add(m, DXM_ORCH_STARTS, DXM_LABELS("A", "1.0.0", "client"), 1);
  dx__metric_add(m, DXM_ORCH_STARTS, DXM_LABELS("A", "1.0.0", "parent"), 10);
  dx__metric_add(m, DXM_ORCH_STARTS, DXM_LABELS("A", "1.0.0", "client"), 1);
  dx__metric_add(m, DXM_ORCH_STARTS, DXM_LABELS("B", "1.0.0", "client"), 100);
  dx__metric_add(m, DXM_ORCH_STARTS, DXM_LABELS("A", "1.0.0", "parent"), 10);
  dx__metric_add(m, DXM_STORE_CYCLES, DXM_LABELS("bad\xff"), 1);
  dx__metric_add(m, DXM_STORE_CYCLES, DXM_LABELS("bad\xef\xbf\xbd"), 2); /* its fixed form */
  dx__metric_add(m, DXM_STORE_CYCLES, DXM_LABELS("bad\xff"), 4);
  dx__metric_add(m, DXM_STORE_CYCLES, DXM_LABELS(longa), 8);
  dx__metric_add(m, DXM_STORE_CYCLES, DXM_LABELS(longb), 16);
  t = dx_metrics_render_prometheus(m);
  ASSERT(t);
  ASSERT_STR_EQ(sample(t, "duroxide_orchestration_starts_total{orchestration_name=\"A\","
                       "version=\"1.0.0\",initiated_by=\"client\"}"), "3");
  ASSERT_STR_EQ(sample(t, "duroxide_orchestration_starts_total{orchestration_name=\"A\","
                       "version=\"1.0.0\",initiated_by=\"parent\"}"), "20");
  ASSERT_STR_EQ(sample(t, "duroxide_orchestration_starts_total{orchestration_name=\"B\","
                       "version=\"1.0.0\",initiated_by=\"client\"}"), "100");
  ASSERT_STR_EQ(sample(t, "duroxide_store_cycles_total{result=\"bad\xef\xbf\xbd\"}"), "7");
  free(t);
  ASSERT_EQ(dx__metric_sum(m, DXM_STORE_CYCLES), 31);
  dx__metrics_free(m);
}

static int reads;
static void set_owned(void *ud) {
  reads++;
  dx__metric_set(ud, DXM_SESS_OWNED, DXM_NOLABELS, 40 + reads);
}

/* dx__metrics_on_read: gauges set when a rendering reads them, until the owner goes. */
DX_TEST(read_time_gauges_are_set_by_each_rendering_until_removed) {
  dx_metrics_t *m = dx__metrics_new();
  char *t;
  dx__metrics_on_read(m, set_owned, m);
  t = dx_metrics_render_prometheus(m);
  ASSERT_STR_EQ(sample(t, "duroxide_sessions_owned"), "41");
  free(t);
  t = dx_metrics_render_json(m);
  ASSERT(t);
  free(t);
  ASSERT_EQ(reads, 2);
  dx__metrics_on_read(m, NULL, NULL);
  t = dx_metrics_render_prometheus(m);
  ASSERT_STR_EQ(sample(t, "duroxide_sessions_owned"), "42"); /* the last value stays */
  free(t);
  ASSERT_EQ(reads, 2);
  dx__metrics_free(m);
}

/* Records come from several threads at once (loop, store thread, renderings): none is lost
** and a rendering running meanwhile sees whole series (the registry's spin lock, spin.h). */
#define RACE_N 200000
static dx_metrics_t *race_m;
static uv_barrier_t race_start; /* the threads start recording together */
static void race_records(void *ud) {
  int i;
  (void)ud;
  uv_barrier_wait(&race_start);
  for (i = 0; i < RACE_N; i++) {
    dx_metrics_t *m = race_m;
    dx__metric_add(m, DXM_STORE_RETRIES, DXM_NOLABELS, 1);
    dx__metric_add(m, DXM_SESS_CLAIMS, DXM_LABELS(i % 2 ? "new" : "reclaim"), 1);
    dx__metric_observe(m, DXM_ORCH_TURN_DURATION, DXM_NOLABELS, 0.001);
  }
}

DX_TEST(records_from_several_threads_all_count) {
  dx_metrics_t *m = dx__metrics_new();
  uv_thread_t t[3];
  int i;
  race_m = m;
  ASSERT_EQ(uv_barrier_init(&race_start, 4), 0);
  for (i = 0; i < 3; i++) ASSERT_EQ(uv_thread_create(&t[i], race_records, NULL), 0);
  uv_barrier_wait(&race_start);
  for (i = 0; i < 20; i++) free(dx_metrics_render_prometheus(m)); /* meanwhile */
  for (i = 0; i < 3; i++) uv_thread_join(&t[i]);
  uv_barrier_destroy(&race_start);
  ASSERT_EQ(dx__metric_sum(m, DXM_STORE_RETRIES), 3 * RACE_N);
  ASSERT_EQ(dx__metric_sum(m, DXM_SESS_CLAIMS), 3 * RACE_N);
  ASSERT_EQ(dx__metric_sum(m, DXM_ORCH_TURN_DURATION), 3 * RACE_N);
  dx__metrics_free(m);
}
