// Legacy fixture client over the deprecated HTTP+SSE transport: the TypeScript
// SDK 1.x (@modelcontextprotocol/sdk 1.32.2) `Client` with `SSEClientTransport`.
//
//   node compat_matrix/peers/ts1_sse_client.mjs [--feature basic|notifications] [--timeout S] --sse-url URL
//
// HTTP+SSE is the only transport it speaks: GET URL opens the event stream,
// whose first `endpoint` event names where to POST. Same contract as the other
// fixture clients (compat_matrix/peers/README.md): initialize, tools/list,
// `echo` (and `add` when listed), then ONE JSON line on stdout
// {"ok", "era", "steps", "error"}; exit 0 iff every check passed.
//
// `--feature notifications` then checks change notifications the legacy way,
// as ts2_client.mjs does in its legacy mode (triggers: _common.py):
// `resources/subscribe`, the tool calls that change the resource and the tool
// list, `notifications/resources/updated` and `notifications/tools/list_changed`
// reaching the SDK's notification handlers (on the event stream), then
// `resources/unsubscribe`.
// The SDK is loaded as in ts2_client.mjs (ESM ignores NODE_PATH).
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const peersNode = process.env.MCP_PEERS_DIR
    ? join(resolve(process.env.MCP_PEERS_DIR), 'node')
    : join(here, '..', '..', '.peers', 'node');
const require = createRequire(join(peersNode, 'package.json'));
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { SSEClientTransport } = require('@modelcontextprotocol/sdk/client/sse.js');
const { ResourceUpdatedNotificationSchema, ToolListChangedNotificationSchema } = require('@modelcontextprotocol/sdk/types.js');

const ECHO_TEXT = 'hello from the compat matrix';
const NOTIFY = 'notifications: ';
const UPDATED = 'notifications/resources/updated';
const TOOLS_CHANGED = 'notifications/tools/list_changed';
const NOTIFY_WAIT_MS = 10000; // a notification may take this long after its trigger returned

function parseArgs(argv) {
    const cut = argv.indexOf('--');
    const server = cut < 0 ? [] : argv.slice(cut + 1);
    const own = cut < 0 ? argv : argv.slice(0, cut);
    const opts = { timeout: 30, sseUrl: null, feature: 'basic' };
    for (let i = 0; i < own.length; i += 2) {
        if (own[i] === '--feature') opts.feature = own[i + 1];
        else if (own[i] === '--timeout') opts.timeout = Number(own[i + 1]);
        else if (own[i] === '--sse-url') opts.sseUrl = own[i + 1];
        else throw new Error(`unknown option ${own[i]}`);
    }
    if (opts.sseUrl === null || server.length > 0) {
        process.stderr.write('usage: ts1_sse_client.mjs [--feature F] [--timeout S] --sse-url URL (HTTP+SSE only: no server command)\n');
        process.exit(2);
    }
    if (!['basic', 'notifications'].includes(opts.feature)) throw new Error(`unknown feature ${opts.feature}`);
    return opts;
}

const report = { ok: false, era: 'legacy', steps: [], error: null };
const step = (name, ok, detail = {}) => {
    report.steps.push({ step: name, ok, ...detail });
    return ok;
};
let finished = false;
function finish() {
    if (finished) return;
    finished = true;
    report.ok = report.error === null && report.steps.length > 0 && report.steps.every(s => s.ok);
    if (!report.ok && report.error === null) {
        report.error = `failed step: ${report.steps.find(s => !s.ok)?.step ?? 'no steps ran'}`;
    }
    process.stdout.write(JSON.stringify(report) + '\n', () => process.exit(report.ok ? 0 : 1));
}

function echoArguments(tool) {
    const props = tool.inputSchema?.properties ?? {};
    const key = 'text' in props ? 'text' : 'message' in props ? 'message' : (Object.keys(props)[0] ?? 'text');
    return { [key]: ECHO_TEXT };
}
const firstText = content => content?.find(b => b.type === 'text')?.text;

async function waitFor(list, pred, since, ms = NOTIFY_WAIT_MS) {
    const deadline = Date.now() + ms;
    for (;;) {
        const found = list.slice(since).find(pred);
        if (found !== undefined || Date.now() >= deadline) return found;
        await new Promise(r => setTimeout(r, 20));
    }
}

// The triggers of _common.py's notify_plan: our fixtures, or server-everything.
function notifyPlan(names, uris) {
    if (names.includes('add_note') && names.includes('register_tool')) {
        const suffix = Math.random().toString(16).slice(2, 8);
        return {
            uri: 'notes://compat',
            update: { name: 'add_note', arguments: { name: 'compat', text: `changed ${suffix}` } },
            listChange: { name: 'register_tool', arguments: { name: `added_${suffix}` } },
            stop: null
        };
    }
    if (names.includes('toggle-subscriber-updates') && uris.length > 0) {
        const toggle = { name: 'toggle-subscriber-updates', arguments: {} };
        return { uri: uris[0], update: toggle, listChange: null, stop: toggle };
    }
    return null;
}

async function callStep(client, trigger) {
    const result = await client.callTool(trigger);
    return step(`${NOTIFY}tools/call ${trigger.name}`, !result.isError, { text: firstText(result.content) });
}

async function checkNotifications(client, names, handled) {
    const uris = names.includes('add_note') ? [] : (await client.listResources()).resources.map(r => r.uri);
    const plan = notifyPlan(names, uris);
    if (!step(`${NOTIFY}trigger tools listed`, plan !== null, plan ? {} : { tools: names })) return;
    const since = handled.length;
    const path = [];
    await client.subscribeResource({ uri: plan.uri });
    step(`${NOTIFY}resources/subscribe`, true, { uri: plan.uri });
    path.push(`resources/subscribe ${plan.uri}`);
    if (!(await callStep(client, plan.update))) return;
    const updated = await waitFor(handled, m => m.method === UPDATED && m.params?.uri === plan.uri, since);
    step(`${NOTIFY}resources/updated on the session`, updated !== undefined);
    path.push('resources/updated');
    if (plan.listChange !== null) {
        if (!(await callStep(client, plan.listChange))) return;
        const changed = await waitFor(handled, m => m.method === TOOLS_CHANGED, since);
        step(`${NOTIFY}tools/list_changed on the session`, changed !== undefined);
        path.push('tools/list_changed');
    } else {
        path.push('tools/list_changed: no trigger on this server');
    }
    if (plan.stop !== null) await callStep(client, plan.stop);
    await client.unsubscribeResource({ uri: plan.uri });
    step(`${NOTIFY}resources/unsubscribe`, true, { uri: plan.uri });
    path[path.length - 1] += ' (the HTTP+SSE event stream); unsubscribed';
    step(`${NOTIFY}delivered`, true, { path: path.join('; ') });
}

async function converse(client, transport, feature) {
    const handled = [];
    // SDK 1.x keys its handlers by a notification's zod schema.
    for (const schema of [ResourceUpdatedNotificationSchema, ToolListChangedNotificationSchema]) {
        client.setNotificationHandler(schema, n => {
            handled.push(n);
        });
    }
    await client.connect(transport);
    step('initialize', true, {
        protocolVersion: transport._protocolVersion ?? null,
        serverInfo: client.getServerVersion()
    });
    const { tools } = await client.listTools();
    const byName = Object.fromEntries(tools.map(t => [t.name, t]));
    step('tools/list', true, { tools: Object.keys(byName).sort() });
    if (!step('echo tool listed', 'echo' in byName)) return;

    let result = await client.callTool({ name: 'echo', arguments: echoArguments(byName.echo) });
    let text = firstText(result.content);
    step('tools/call echo', typeof text === 'string' && text.includes(ECHO_TEXT) && !result.isError, { text });

    if ('add' in byName) {
        result = await client.callTool({ name: 'add', arguments: { a: 2, b: 3 } });
        text = firstText(result.content);
        const value = result.structuredContent?.result ?? text;
        step('tools/call add', String(value) === '5' && !result.isError, {
            structuredContent: result.structuredContent ?? null,
            text
        });
    }
    if (feature === 'notifications') await checkNotifications(client, Object.keys(byName).sort(), handled);
}

const opts = parseArgs(process.argv.slice(2));
// Every wait is bounded: the whole run, however it goes.
const deadline = setTimeout(() => {
    report.error = `timeout after ${opts.timeout}s`;
    finish();
}, opts.timeout * 1000);
const client = new Client({ name: 'ts1-sse-client', version: '1.0.0' });
const transport = new SSEClientTransport(new URL(opts.sseUrl));
try {
    await converse(client, transport, opts.feature);
    await client.close();
} catch (err) {
    report.error = `${err?.name ?? 'Error'}: ${err?.message ?? err}`;
} finally {
    clearTimeout(deadline);
    finish();
}
