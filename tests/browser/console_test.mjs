// tests/browser/console_test.mjs -- the web console in a real browser (Debian's Chromium,
// headless, driven by playwright-core). tests/browser.sh prepares the store, the worker and the
// console, then runs: node console_test.mjs. Prints TAP.
//   env: CONSOLE_URL, WORKER_ID, SHOT_DIR, PROFILE_DIR, PLAYWRIGHT (the playwright-core dir),
//        CHROMIUM (the browser binary)
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { chromium } = require(process.env.PLAYWRIGHT);
const URL = process.env.CONSOLE_URL;
const WORKER = process.env.WORKER_ID;
const WORKER_PID = process.env.WORKER_PID;
const SHOTS = process.env.SHOT_DIR;
const WAIT = 20000; // upper bound for one page condition; no assertion depends on time

let n = 0, failed = 0;
function ok(cond, name, diag) {
  n++;
  if (cond) { console.log(`ok ${n} - ${name}`); return; }
  failed++;
  console.log(`not ok ${n} - ${name}`);
  if (diag) console.log(String(diag).split('\n').map((l) => '#   ' + l).join('\n'));
}
async function check(name, fn) {
  try { await fn(); ok(true, name); } catch (e) { ok(false, name, e.stack || e.message); }
}
function expect(cond, msg) { if (!cond) throw new Error(msg); }

const ctx = await chromium.launchPersistentContext(process.env.PROFILE_DIR, {
  executablePath: process.env.CHROMIUM,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--disable-quic'],
  viewport: { width: 1280, height: 860 },
});
const page = ctx.pages()[0] || await ctx.newPage();
const consoleErrors = [];
// Script errors count; an API call answered with an error status is shown on the page (the
// read-only test provokes a 403) and is not one.
page.on('console', (m) => {
  if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) consoleErrors.push(m.text());
});
page.on('pageerror', (e) => consoleErrors.push(e.message));
const row = (attr, id) => page.locator(`tr[${attr}="${id}"]`);
const statusOf = (id) => row('data-instance', id).locator('.status');
// Open an instance's page and wait until that page (not the one before it) is shown.
async function openInstance(id) {
  await page.goto(URL + '#/instance/' + encodeURIComponent(id));
  await page.waitForFunction((want) => document.querySelector('h1 .mono')?.textContent === want, id, { timeout: WAIT });
}
const shot = (name) => page.screenshot({ path: `${SHOTS}/${name}.png`, fullPage: true });

await check('instances page lists running, completed and failed instances', async () => {
  await page.goto(URL + '#/instances');
  await row('data-instance', 'done-1').waitFor({ timeout: WAIT });
  expect(await statusOf('done-1').textContent() === 'Completed', 'done-1 is not Completed');
  expect(await statusOf('fail-1').textContent() === 'Failed', 'fail-1 is not Failed');
  expect(await statusOf('wait-1').textContent() === 'Running', 'wait-1 is not Running');
  expect(await statusOf('sess-1').textContent() === 'Running', 'sess-1 is not Running');
  await shot('instances');
});

await check('the status filter shows only failed instances', async () => {
  await page.selectOption('[data-test=filter-status]', 'Failed'); // applies at once
  await page.waitForFunction(() => {
    const rows = [...document.querySelectorAll('tr[data-instance]')];
    return rows.length === 1 && rows[0].dataset.instance === 'fail-1';
  }, null, { timeout: WAIT });
  await page.selectOption('[data-test=filter-status]', '');
  await row('data-instance', 'done-1').waitFor({ timeout: WAIT });
});

await check('what is typed into a form survives the page refresh', async () => {
  await page.fill('[data-test=filter-name]', 'Hel');
  await page.locator('h1').click(); // the field loses the focus: refreshes run again
  const before = Number(await page.getAttribute('#view', 'data-renders'));
  await page.waitForFunction((n) => Number(document.querySelector('#view').dataset.renders) > n, before, { timeout: WAIT });
  expect(await page.inputValue('[data-test=filter-name]') === 'Hel', 'the typed name was lost in a refresh');
  await page.fill('[data-test=filter-name]', '');
});

await check('the failed instance shows its error', async () => {
  await row('data-instance', 'fail-1').locator('a').click();
  await page.waitForSelector('[data-test=error]', { timeout: WAIT });
  const text = await page.textContent('[data-test=error]');
  expect(text.includes('boom: x'), 'error text lacks "boom: x": ' + text);
});

await check('an instance page shows input, custom status, history and the awaited event', async () => {
  await openInstance('wait-1');
  await page.waitForSelector('[data-test=pending] td', { timeout: WAIT });
  expect((await page.textContent('[data-test=input]')).includes('"a": 1'), 'input not shown');
  expect((await page.textContent('[data-test=summary]')).includes('waiting_for'), 'custom status not shown');
  expect((await page.textContent('[data-test=pending]')).includes('go'), 'awaited event "go" not pending');
  expect(await page.locator('[data-test=history] tr[data-event=OrchestrationStarted]').count() === 1, 'no OrchestrationStarted in the timeline');
});

await check('raising "go" from the page completes the instance with the data', async () => {
  await page.fill('[data-test=raise-event]', 'go');
  await page.fill('[data-test=raise-data]', '{"from": "browser"}');
  await page.click('[data-test=raise]');
  await page.waitForFunction(() => document.querySelector('h1 .status')?.textContent === 'Completed', null, { timeout: WAIT });
  const out = await page.textContent('[data-test=output]');
  expect(out.includes('browser'), 'output lacks the raised data: ' + out);
  expect(await page.locator('[data-test=history] tr[data-event=ExternalEvent]').count() === 1, 'no ExternalEvent in the timeline');
  await shot('instance');
});

await check('cancelling from the page ends the sleeping instance', async () => {
  await openInstance('sleep-1');
  await page.waitForSelector('[data-test=cancel]', { timeout: WAIT });
  expect(await page.textContent('h1 .status') === 'Running', 'sleep-1 is not Running before the cancel');
  await page.fill('[data-test=reason]', 'from the browser test');
  await page.click('[data-test=cancel]');
  await page.waitForFunction(() => document.querySelector('h1 .status')?.textContent === 'Failed', null, { timeout: WAIT });
  const err = await page.textContent('[data-test=error]');
  expect(/cancel/i.test(err), 'error does not say cancelled: ' + err);
});

await check('terminating from the page fails the instance, and delete removes it', async () => {
  await openInstance('sleep-2');
  await page.waitForSelector('[data-test=terminate]', { timeout: WAIT });
  await page.fill('[data-test=reason]', 'stuck in the browser test');
  await page.click('[data-test=terminate]');
  await page.waitForFunction(() => document.querySelector('h1 .status')?.textContent === 'Failed', null, { timeout: WAIT });
  expect((await page.textContent('[data-test=error]')).includes('stuck in the browser test'), 'reason not in the error');
  await page.click('[data-test=delete]');
  await page.waitForFunction(() => location.hash === '#/instances', null, { timeout: WAIT });
  await row('data-instance', 'done-1').waitFor({ timeout: WAIT });
  expect(await row('data-instance', 'sleep-2').count() === 0, 'sleep-2 still listed after delete');
});

await check('a parent lists its child, linked', async () => {
  await openInstance('parent-1');
  await page.waitForSelector('[data-test=children] a', { timeout: WAIT });
  expect((await page.textContent('[data-test=children]')).includes('child-of-parent'), 'child not listed');
  await page.click('[data-test=children] a');
  await page.waitForFunction(() => document.querySelector('h1 .mono')?.textContent === 'child-of-parent', null, { timeout: WAIT });
});

await check('an older execution of a continued-as-new instance shows its own history', async () => {
  await openInstance('counter-1');
  await page.waitForSelector('[data-test=execution]', { timeout: WAIT });
  expect(await page.locator('[data-test=history] tr[data-event=OrchestrationCompleted]').count() === 1, 'the current execution did not complete');
  await page.selectOption('[data-test=execution]', '1');
  await page.waitForSelector('[data-test=history] tr[data-event=OrchestrationContinuedAsNew]', { timeout: WAIT });
  expect(await page.locator('[data-test=history] tr[data-event=OrchestrationCompleted]').count() === 0, 'execution 1 shows a completion');
});

await check('sessions page shows the session owned by the live worker', async () => {
  await page.goto(URL + '#/sessions');
  const r = row('data-session', 'sess-A');
  await r.waitFor({ timeout: WAIT });
  const text = await r.textContent();
  expect(text.includes(WORKER), `owner ${WORKER} not shown: ${text}`);
  expect(await r.locator('.lease').textContent() === 'live', 'lease is not live');
  await page.waitForSelector('[data-test=moves] td', { timeout: WAIT });
  expect((await page.textContent('[data-test=moves]')).includes('claimed'), 'the claim is not in the moves');
  await shot('sessions');
});

await check('workers page shows the live worker process and its session', async () => {
  await page.goto(URL + '#/workers');
  const r = row('data-worker', WORKER);
  await r.waitFor({ timeout: WAIT });
  const text = await r.textContent();
  expect(text.includes('sess-A'), 'session sess-A not listed for the worker');
  expect(!WORKER_PID || text.includes(WORKER_PID), `worker process id ${WORKER_PID} not shown: ${text}`);
  await shot('workers');
});

await check('metrics page draws the charts from samples', async () => {
  await page.goto(URL + '#/metrics');
  await page.waitForSelector('[data-series=orchestrator_queue] polyline', { state: 'attached', timeout: WAIT });
  await page.waitForFunction(() => {
    const p = document.querySelector('[data-series=sessions_owned] polyline');
    return p && p.getAttribute('points').split(' ').length >= 2;
  }, null, { timeout: WAIT });
  expect(await page.locator('[data-test=charts] figure').count() >= 6, 'fewer than 6 charts');
  await shot('metrics');
});

await check('a read-only console hides the actions and the API refuses them', async () => {
  const ro = process.env.CONSOLE_RO_URL;
  await page.goto(ro + '#/instance/sess-1');
  await page.waitForSelector('#mode:not(.hidden)', { timeout: WAIT });
  expect(await page.locator('[data-test=raise]').count() === 0, 'raise form shown in read-only mode');
  const status = await page.evaluate(async () => (await fetch('/api/raise', {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{"id":"sess-1","event":"done"}',
  })).status);
  expect(status === 403, 'raise answered ' + status);
});

ok(consoleErrors.length === 0, 'no script errors in the pages', consoleErrors.join('\n'));
await ctx.close();
console.log(`1..${n}`);
process.exit(failed ? 1 : 0);
