// Dual-era fixture client: TypeScript SDK 2.x (@modelcontextprotocol/client@2.4.0).
//
//   node compat_matrix/peers/ts2_client.mjs [--mode auto|legacy|2026-07-28] [--feature F] [--timeout S] -- SERVER_COMMAND ARGS...
//   node compat_matrix/peers/ts2_client.mjs [--mode ...] [--feature F] [--timeout S] --url URL
//
// Same contract as the Python fixture clients: connect, tools/list, `echo`
// (and `add` when listed), then ONE JSON line on stdout
// {"ok", "era", "steps", "error"}; exit 0 iff every check passed.
//
// Mode `auto` (the default here; the SDK's own default is 'legacy') probes
// `server/discover` on a short-lived SIBLING process spawned from the same
// command, then starts the real session process: the server command runs
// twice per connect. A version string pins the modern era (no fallback).
// `--url URL` connects with the SDK's StreamableHTTPClientTransport instead.
// SDK packages are loaded as in ts2_modern_server.mjs (ESM ignores NODE_PATH).
//
// `--feature notifications` (see _common.py for the triggers) then checks change
// notifications in the era the client ended up in, through the SDK's own API:
// `setNotificationHandler` for resources/updated and tools/list_changed, and
// modern `client.listen({toolsListChanged, resourceSubscriptions})` (resolves on
// the acknowledgement; `close()` cancels it) or legacy `subscribeResource` /
// `unsubscribeResource`. A tap on the transport's onmessage records the raw
// wire messages: on the modern wire the acknowledgement must be the listen's
// first tagged message and every change notification must carry its id in
// `_meta["io.modelcontextprotocol/subscriptionId"]`.
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const peersNode = process.env.MCP_PEERS_DIR
    ? join(resolve(process.env.MCP_PEERS_DIR), 'node')
    : join(here, '..', '..', '.peers', 'node');
const require = createRequire(join(peersNode, 'package.json'));
const { Client, StreamableHTTPClientTransport } = require('@modelcontextprotocol/client');
const { StdioClientTransport } = require('@modelcontextprotocol/client/stdio');

const ECHO_TEXT = 'hello from the compat matrix';

function parseArgs(argv) {
    const cut = argv.indexOf('--');
    const server = cut < 0 ? [] : argv.slice(cut + 1);
    const own = cut < 0 ? argv : argv.slice(0, cut);
    const opts = { mode: 'auto', timeout: 30, server, url: null, feature: 'basic' };
    for (let i = 0; i < own.length; i += 2) {
        if (own[i] === '--mode') opts.mode = own[i + 1];
        else if (own[i] === '--feature') opts.feature = own[i + 1];
        else if (own[i] === '--timeout') opts.timeout = Number(own[i + 1]);
        else if (own[i] === '--url') opts.url = own[i + 1];
        else throw new Error(`unknown option ${own[i]}`);
    }
    if ((opts.url === null) === (server.length === 0)) {
        process.stderr.write('usage: ts2_client.mjs [--mode M] [--feature F] [--timeout S] (--url URL | -- SERVER_COMMAND [ARGS...])\n');
        process.exit(2);
    }
    if (!['basic', 'notifications'].includes(opts.feature)) throw new Error(`unknown feature ${opts.feature}`);
    return opts;
}

const report = { ok: false, era: null, steps: [], error: null };
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

// -- the notifications check ------------------------------------------------
const NOTIFY = 'notifications: ';
const SUB_ID = 'io.modelcontextprotocol/subscriptionId';
const UPDATED = 'notifications/resources/updated';
const TOOLS_CHANGED = 'notifications/tools/list_changed';
const CHANGES = new Set([UPDATED, TOOLS_CHANGED, 'notifications/prompts/list_changed', 'notifications/resources/list_changed']);
const NOTIFY_WAIT_MS = 10000;
const tagOf = m => m?.params?._meta?.[SUB_ID];
const wire = []; // every message the transport delivered after connect, in order
const handled = []; // the notifications the SDK's handlers were called with

function tap(transport) {
    const inner = transport.onmessage;
    transport.onmessage = (message, extra) => {
        wire.push(message);
        return inner?.call(transport, message, extra);
    };
}

async function waitFor(list, pred, since = 0, ms = NOTIFY_WAIT_MS) {
    const deadline = Date.now() + ms;
    for (;;) {
        const found = list.slice(since).find(pred);
        if (found !== undefined || Date.now() >= deadline) return found;
        await new Promise(r => setTimeout(r, 20));
    }
}

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

async function checkNotifications(client, byName, channel) {
    const names = Object.keys(byName).sort();
    const uris = names.includes('add_note') ? [] : (await client.listResources()).resources.map(r => r.uri);
    const plan = notifyPlan(names, uris);
    if (!step(`${NOTIFY}trigger tools listed`, plan !== null, plan ? {} : { tools: names })) return;
    for (const method of [UPDATED, TOOLS_CHANGED]) {
        client.setNotificationHandler(method, n => {
            handled.push(n);
        });
    }
    const isUpdate = m => m.method === UPDATED && m.params?.uri === plan.uri;
    const isToolsChanged = m => m.method === TOOLS_CHANGED;
    const path = [];
    const handledSince = handled.length;
    const wireSince = wire.length;
    if (report.era === 'modern') {
        const sub = await client.listen({ toolsListChanged: true, resourceSubscriptions: [plan.uri] });
        const ack = wire.slice(wireSince).find(m => m.method === 'notifications/subscriptions/acknowledged');
        const listenId = tagOf(ack);
        const first = wire.slice(wireSince).find(m => listenId !== undefined && tagOf(m) === listenId);
        step(`${NOTIFY}listen acknowledged first`, ack !== undefined && first === ack, {
            subscriptionId: listenId,
            honored: sub.honoredFilter
        });
        const honored = sub.honoredFilter ?? {};
        step(`${NOTIFY}filter honored`,
            (honored.resourceSubscriptions ?? []).includes(plan.uri) && (plan.listChange === null || honored.toolsListChanged === true),
            { honored });
        path.push(`listen id ${JSON.stringify(listenId)}`, 'acknowledged');
        try {
            if (!(await callStep(client, plan.update))) return;
            const updated = await waitFor(handled, isUpdate, handledSince);
            step(`${NOTIFY}resources/updated to the handler, tagged`, updated !== undefined && tagOf(updated) === listenId, {
                tag: tagOf(updated)
            });
            path.push(`resources/updated ${plan.uri}`);
            if (plan.listChange !== null) {
                if (!(await callStep(client, plan.listChange))) return;
                const changed = await waitFor(handled, isToolsChanged, handledSince);
                step(`${NOTIFY}tools/list_changed to the handler, tagged`, changed !== undefined && tagOf(changed) === listenId, {
                    tag: tagOf(changed)
                });
                path.push('tools/list_changed');
            } else {
                path.push('tools/list_changed: no trigger on this server');
            }
            if (plan.stop !== null) await callStep(client, plan.stop);
        } finally {
            await sub.close();
        }
        const how = await Promise.race([sub.closed, new Promise(r => setTimeout(() => r('not closed'), 5000))]);
        const echo = await client.callTool({ name: 'echo', arguments: echoArguments(byName.echo) });
        step(`${NOTIFY}listen cancelled`, how === 'local' && !echo.isError, { closed: how });
        path.push(`cancelled (McpSubscription.close(): ${how})`);
        const untagged = wire.slice(wireSince).filter(m => CHANGES.has(m.method) && tagOf(m) !== listenId);
        step(`${NOTIFY}every change notification tagged with the listen's id`, untagged.length === 0, {
            other: untagged.slice(0, 3)
        });
    } else {
        await client.subscribeResource({ uri: plan.uri });
        step(`${NOTIFY}resources/subscribe`, true, { uri: plan.uri });
        path.push(`resources/subscribe ${plan.uri}`);
        if (!(await callStep(client, plan.update))) return;
        const updated = await waitFor(handled, isUpdate, handledSince);
        step(`${NOTIFY}resources/updated on the session`, updated !== undefined);
        path.push('resources/updated');
        if (plan.listChange !== null) {
            if (!(await callStep(client, plan.listChange))) return;
            const changed = await waitFor(handled, isToolsChanged, handledSince);
            step(`${NOTIFY}tools/list_changed on the session`, changed !== undefined);
            path.push('tools/list_changed');
        } else {
            path.push('tools/list_changed: no trigger on this server');
        }
        if (plan.stop !== null) await callStep(client, plan.stop);
        await client.unsubscribeResource({ uri: plan.uri });
        step(`${NOTIFY}resources/unsubscribe`, true, { uri: plan.uri });
        path[path.length - 1] += ` (${channel}); unsubscribed`;
    }
    step(`${NOTIFY}delivered`, true, { path: path.join('; ') });
}

async function converse(client, feature, channel) {
    report.era = client.getProtocolEra() ?? null;
    step('connect', true, {
        protocolVersion: client.getNegotiatedProtocolVersion(),
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
            structuredContent: result.structuredContent,
            text
        });
    }
    if (feature === 'notifications') await checkNotifications(client, byName, channel);
}

async function main() {
    const opts = parseArgs(process.argv.slice(2));
    const mode = opts.mode === 'auto' || opts.mode === 'legacy' ? opts.mode : { pin: opts.mode };
    // Hard timeout: report, then exit (process.exit also takes the child down
    // via the transport's close below when it gets the chance).
    const timer = setTimeout(() => {
        report.error = `timeout after ${opts.timeout}s`;
        transport?.close().finally(finish);
        setTimeout(finish, 2000).unref();
    }, opts.timeout * 1000);
    timer.unref();

    const client = new Client(
        { name: 'ts2-fixture-client', version: '2.4.0' },
        { versionNegotiation: { mode } }
    );
    // Whole environment through: the SDK passes only a safe subset by default.
    var transport = opts.url !== null
        ? new StreamableHTTPClientTransport(new URL(opts.url))
        : new StdioClientTransport({
              command: opts.server[0],
              args: opts.server.slice(1),
              env: { ...process.env },
              stderr: 'inherit'
          });
    try {
        await client.connect(transport, { timeout: opts.timeout * 1000 });
        tap(transport);
        await converse(client, opts.feature, opts.url !== null ? "the session's GET stream" : 'stdio');
    } catch (err) {
        const detail = err?.code !== undefined ? { code: err.code, message: err.message, data: err.data } : {};
        if (err?.code !== undefined) step('error', false, detail);
        report.error = `${err?.name ?? 'Error'}: ${err?.message ?? err}`;
    } finally {
        clearTimeout(timer);
        await transport.close().catch(() => {});
    }
    finish();
}

main();
