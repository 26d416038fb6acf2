// Dual-era fixture client: TypeScript SDK 2.x (@modelcontextprotocol/client@2.4.0).
//
//   node compat_matrix/peers/ts2_client.mjs [--mode auto|legacy|2026-07-28] [--timeout S] -- SERVER_COMMAND ARGS...
//   node compat_matrix/peers/ts2_client.mjs [--mode ...] [--timeout S] --url URL
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
    const opts = { mode: 'auto', timeout: 30, server, url: null };
    for (let i = 0; i < own.length; i += 2) {
        if (own[i] === '--mode') opts.mode = own[i + 1];
        else if (own[i] === '--timeout') opts.timeout = Number(own[i + 1]);
        else if (own[i] === '--url') opts.url = own[i + 1];
        else throw new Error(`unknown option ${own[i]}`);
    }
    if ((opts.url === null) === (server.length === 0)) {
        process.stderr.write('usage: ts2_client.mjs [--mode M] [--timeout S] (--url URL | -- SERVER_COMMAND [ARGS...])\n');
        process.exit(2);
    }
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

async function converse(client) {
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
        await converse(client);
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
