/* credit.c -- the activity fetch credit of a worker (see credit.h). */
#include "credit.h"

void dx__credit_init(dx__credit_t *c, int slots) {
  c->slots = slots > 0 ? slots : 1;
  c->asked = c->held = 0;
  c->cost_ns = 0;
}

void dx__credit_fetched(dx__credit_t *c, int n) {
  c->asked = c->asked > n ? c->asked - n : 0;
  c->held += n;
}

void dx__credit_settled(dx__credit_t *c) {
  if (c->held > 0) c->held--;
}

void dx__credit_cost(dx__credit_t *c, uint64_t ns) {
  /* weight 1/8: a few cheap starts after expensive ones (or the reverse) move the batch */
  c->cost_ns = c->cost_ns ? (c->cost_ns * 7 + ns) / 8 : (ns ? ns : 1);
}

int dx__credit_top_up(dx__credit_t *c) {
  uint64_t batch = c->cost_ns ? DX__CREDIT_LOOP_NS / c->cost_ns : DX__CREDIT_FIRST;
  int free_slots = c->slots - c->held, target, more;
  if (batch < 1) batch = 1;
  target = batch < (uint64_t)free_slots ? (int)batch : free_slots;
  more = target - c->asked;
  if (more <= 0) return 0;
  c->asked += more;
  return more;
}
