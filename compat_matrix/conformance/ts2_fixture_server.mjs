// Conformance fixture server on @modelcontextprotocol/server@2.4.0 (TS SDK 2.x):
// every fixture the official conformance suite's server scenarios call, the
// same tools/resources/prompts as py2_fixture_server.py.
//
//   node compat_matrix/conformance/ts2_fixture_server.mjs [--http PORT] [--modern-only | --push]
//
// Default: dual-era over stdio (`serveStdio(factory)`). `--modern-only` refuses
// a legacy `initialize` with -32022 (`legacy: 'reject'`). `--http PORT` serves
// Streamable HTTP on 127.0.0.1:PORT/mcp through a small node:http -> fetch
// bridge (`@modelcontextprotocol/node` is not installed) with a Host/Origin
// check (DNS rebinding protection):
//   - modern requests go to `createMcpHandler(factory, {legacy: 'reject'})`;
//   - dual-era: legacy requests (`isLegacyRequest`) go to sessionful
//     `WebStandardStreamableHTTPServerTransport`s, one per `Mcp-Session-Id`
//     (the handler's own legacy fallback is stateless, and pushed requests
//     need a session to POST their answers to);
//   - modern-only: legacy `initialize` -> 400 + -32022 (the handler's), GET and
//     DELETE -> 405.
//
// Handlers are written once in the SDK's multi-round-trip style: they return
// `inputRequired(...)` under the scenario's own keys (`user_name`, `step1`, ...)
// until the retry carries the answers. On the modern wire the client sees the
// InputRequiredResult (the SDK answers -32021 for a capability the request did
// not declare); in a legacy session the SDK's legacy shim pushes the requests
// (elicitation/create, sampling/createMessage, roots/list) and re-enters the
// handler. requestState is sealed with the SDK's HMAC codec
// (`createRequestStateCodec`); a tampered one is -32602 before the handler runs.
//
// `--push` (issue #10): dual-era, but elicitation and sampling are pushed with
// the SDK's push API (`ctx.mcpReq.elicitInput` / `ctx.mcpReq.requestSampling`)
// whatever the era, as a tool written push-style does; roots stay
// multi-round-trip (the handler context has no push API for roots/list).
//
// The texts, payloads and request shapes come from fixture_data.json, the JSON
// export of fixture_data.py (tests/test_conformance_fixtures.py keeps them in
// sync). Logs go to stderr only.
import { randomBytes, randomUUID } from 'node:crypto';
import { createServer as createHttpServer } from 'node:http';
import {
    answerText,
    elicitationSummary,
    form,
    fx,
    pyJson,
    requirePeer,
    rootCount,
    sample,
    sampledText
} from './fixture_data.mjs';

const require = requirePeer;
const {
    CLIENT_CAPABILITIES_META_KEY,
    McpServer,
    ResourceTemplate,
    WebStandardStreamableHTTPServerTransport,
    completable,
    createMcpHandler,
    createRequestStateCodec,
    fromJsonSchema,
    hostHeaderValidationResponse,
    inputRequired,
    inputResponse,
    isLegacyRequest,
    localhostAllowedHostnames,
    localhostAllowedOrigins,
    originValidationResponse
} = require('@modelcontextprotocol/server');
const { serveStdio } = require('@modelcontextprotocol/server/stdio');
const { z } = require('zod');


const argv = process.argv.slice(2);
const modernOnly = argv.includes('--modern-only');
const pushStyle = argv.includes('--push');
const httpAt = argv.indexOf('--http');
const httpPort = httpAt >= 0 ? Number(argv[httpAt + 1]) : null;

const log = msg => process.stderr.write(`ts2_fixture_server: ${msg}\n`);
const onerror = err => log(err?.message ?? String(err));

// One key per process: every round of a flow reaches this process.
const stateCodec = createRequestStateCodec({ key: randomBytes(32) });

// Set once the HTTP handler exists: modern list-changed events go to its
// subscriptions/listen bus. On stdio the entry reroutes the modern
// instance's own list-changed notifications onto the listen streams.
let httpHandler = null;

const ANSWER_KIND = { 'elicitation/create': 'elicit', 'sampling/createMessage': 'sampling', 'roots/list': 'roots' };

const text = t => ({ content: [{ type: 'text', text: t }] });

/**
 * The answers for every key of `asks`, or an InputRequiredResult asking for
 * the missing ones (with `state` sealed into requestState). An answer of the
 * wrong kind (e.g. `{user_name: 12345}`) counts as missing and is asked again.
 */
async function gather(ctx, asks, state) {
    if (pushStyle && Object.values(asks).every(ask => ask.method !== 'roots/list')) {
        const answers = {};
        for (const [key, ask] of Object.entries(asks)) {
            answers[key] =
                ask.method === 'elicitation/create'
                    ? await ctx.mcpReq.elicitInput(ask.params)
                    : await ctx.mcpReq.requestSampling(ask.params);
        }
        return { answers };
    }
    const responses = ctx.mcpReq.inputResponses;
    const answers = {};
    const missing = {};
    for (const [key, ask] of Object.entries(asks)) {
        if (inputResponse(responses, key).kind === ANSWER_KIND[ask.method]) answers[key] = responses[key];
        else missing[key] = ask;
    }
    if (Object.keys(missing).length === 0) return { answers };
    const spec = { inputRequests: missing };
    if (state !== undefined) spec.requestState = await stateCodec.mint(state);
    return { pending: inputRequired(spec) };
}

/** The verified requestState payload of this round, or {}. */
const stateOf = ctx => {
    const state = ctx.mcpReq.requestState();
    return state && typeof state === 'object' ? state : {};
};

// ---- the server ------------------------------------------------------------

function createFixture({ era }) {
    const mcp = new McpServer(
        { name: 'ts2-conformance-fixture', version: '2.4.0' },
        {
            instructions: 'Conformance fixtures.',
            capabilities: { logging: {} },
            requestState: { verify: stateCodec.verify }
        }
    );
    const declared = (ctx, capability) => {
        const caps =
            era === 'modern' ? ctx.mcpReq.envelope?.[CLIENT_CAPABILITIES_META_KEY] : mcp.server.getClientCapabilities();
        return caps?.[capability] !== undefined && caps?.[capability] !== null;
    };
    const tool = (name, description, handler, inputSchema) =>
        mcp.registerTool(name, { description, ...(inputSchema && { inputSchema: fromJsonSchema(inputSchema) }) }, handler);
    const listChanged = kind => {
        if (era === 'modern' && httpHandler) httpHandler.notify[kind === 'tools' ? 'toolsChanged' : 'promptsChanged']();
        else if (kind === 'tools') mcp.sendToolListChanged();
        else mcp.sendPromptListChanged();
    };
    const progress = async (ctx, value, total, message) => {
        const token = ctx.mcpReq._meta?.progressToken;
        if (token === undefined) return;
        const params = { progressToken: token, progress: value, total, ...(message && { message }) };
        await ctx.mcpReq.notify({ method: 'notifications/progress', params });
    };
    const sleep = ms => new Promise(r => setTimeout(r, ms));
    const embedded = (uri, body, mimeType) => ({ type: 'resource', resource: { uri, mimeType, text: body } });

    // ---- plain content tools (test_simple_text first: http-header-validation calls the first listed tool)
    tool('test_simple_text', 'Tests simple text content response.', async () => text(fx.SIMPLE_TEXT));
    tool('test_image_content', 'Tests image content response.', async () => ({
        content: [{ type: 'image', data: fx.PNG_B64, mimeType: 'image/png' }]
    }));
    tool('test_audio_content', 'Tests audio content response.', async () => ({
        content: [{ type: 'audio', data: fx.WAV_B64, mimeType: 'audio/wav' }]
    }));
    tool('test_embedded_resource', 'Tests embedded resource content response.', async () => ({
        content: [embedded('test://embedded-resource', fx.EMBEDDED_TEXT, 'text/plain')]
    }));
    tool('test_multiple_content_types', 'Tests response with multiple content types (text, image, resource).', async () => ({
        content: [
            { type: 'text', text: 'Multiple content types test:' },
            { type: 'image', data: fx.PNG_B64, mimeType: 'image/png' },
            embedded('test://mixed-content-resource', fx.MIXED_JSON, 'application/json')
        ]
    }));
    tool('test_error_handling', 'Tests error response handling (a result with isError: true).', async () => ({
        ...text(fx.ERROR_TEXT),
        isError: true
    }));
    tool('test_tool_with_logging', 'Emits three info log messages (modern: only if the request sets a logLevel).', async ctx => {
        for (const message of ['Tool execution started', 'Tool processing data', 'Tool execution completed']) {
            await ctx.mcpReq.log('info', message);
            await sleep(50);
        }
        return text('Tool with logging executed successfully');
    });
    tool('test_tool_with_progress', 'Reports progress 0, 50, 100 of 100 (when the request has a progressToken).', async ctx => {
        for (const step of [0, 50, 100]) {
            await progress(ctx, step, 100, `Completed step ${step} of 100`);
            await sleep(50);
        }
        return text('Progress reported');
    });
    tool('test_reconnection', 'SEP-1699 reconnection target: closes the legacy SSE stream mid-call.', async ctx => {
        // Only with an event store (legacy HTTP sessions): the client resumes with Last-Event-ID.
        ctx.http?.closeSSE?.();
        await sleep(100);
        return text('Reconnection test completed successfully.');
    });
    tool('test_logging_tool', 'Logs once; a modern request without `_meta` logLevel must see no notifications/message.', async ctx => {
        await ctx.mcpReq.log('info', 'Diagnostic trace logging activated');
        return text('Logging evaluated');
    });
    tool('test_streaming_elicitation', 'Diagnostic: reports progress; never sends an independent request on the stream.', async ctx => {
        await progress(ctx, 50, 100);
        return text('Streaming complete');
    });
    tool('test_trigger_tool_change', 'Publishes a tools list-changed event (listen streams; legacy sessions get a notification).', async () => {
        listChanged('tools');
        return text('Mutation triggered');
    });
    tool('test_trigger_prompt_change', 'Publishes a prompts list-changed event.', async () => {
        listChanged('prompts');
        return text('Mutation triggered');
    });
    tool(
        'test_header_param',
        'SEP-2243 custom header target: `region` is mirrored in Mcp-Param-Region.',
        async ({ region }) => text(`region=${region ?? 'eu'}`),
        { type: 'object', properties: { region: { type: 'string', default: 'eu', 'x-mcp-header': 'Region' } } }
    );
    tool(
        'json_schema_2020_12_tool',
        'Tool with JSON Schema 2020-12 features for conformance testing (SEP-1613).',
        async args => text(`JSON Schema 2020-12 tool called with: ${pyJson({ name: args?.name ?? null, address: args?.address ?? null })}`),
        fx.JSON_SCHEMA_2020_12
    );

    // ---- tools that ask the client (MRTR on modern, pushed by the SDK's shim on legacy)
    tool(
        'test_sampling',
        'Tests server-initiated sampling (LLM completion request).',
        async ({ prompt }, ctx) => {
            const got = await gather(ctx, { sample: sample(prompt, 100) });
            return got.pending ?? text(`LLM response: ${sampledText(got.answers.sample)}`);
        },
        { type: 'object', properties: { prompt: { type: 'string' } }, required: ['prompt'] }
    );
    const elicitTool = async (ctx, message, props, required, prefix) => {
        const got = await gather(ctx, { form: form(message, props, required) });
        return got.pending ?? text(prefix + elicitationSummary(got.answers.form));
    };
    tool(
        'test_elicitation',
        'Tests server-initiated elicitation (user input request).',
        async ({ message }, ctx) => elicitTool(ctx, message, fx.ELICIT_RESPONSE_PROPS, ['response'], 'User response: '),
        { type: 'object', properties: { message: { type: 'string' } }, required: ['message'] }
    );
    tool('test_elicitation_sep1034_defaults', 'Tests elicitation with default values per SEP-1034.', async ctx =>
        elicitTool(ctx, fx.SEP1034_MESSAGE, fx.SEP1034_PROPS, [], 'Elicitation completed: ')
    );
    tool('test_elicitation_sep1330_enums', 'Tests elicitation with enum schema improvements per SEP-1330.', async ctx =>
        elicitTool(ctx, fx.SEP1330_MESSAGE, fx.SEP1330_PROPS, [], 'Elicitation completed: ')
    );
    tool('test_missing_capability', 'Needs sampling: a modern client that did not declare it gets -32021.', async ctx => {
        const got = await gather(ctx, { sample: sample('Say hello', 10) });
        return got.pending ?? text('Success');
    });
    tool('test_input_required_result_elicitation', 'MRTR: elicitation under key `user_name`, then `Hello, <name>!`.', async ctx => {
        const got = await gather(ctx, { user_name: fx.ASK_NAME });
        return got.pending ?? text(`Hello, ${answerText(got.answers.user_name, 'name')}!`);
    });
    tool('test_input_required_result_sampling', 'MRTR: sampling under key `capital_question`.', async ctx => {
        const got = await gather(ctx, { capital_question: fx.CAPITAL });
        return got.pending ?? text(`Sampling result: ${sampledText(got.answers.capital_question)}`);
    });
    tool('test_input_required_result_list_roots', 'MRTR: roots/list under key `client_roots`.', async ctx => {
        const got = await gather(ctx, { client_roots: fx.ROOTS });
        return got.pending ?? text(`Found ${rootCount(got.answers.client_roots)} root(s)`);
    });
    tool('test_input_required_result_request_state', 'MRTR: elicitation plus requestState; the retry must echo it (`state-ok`).', async ctx => {
        const got = await gather(ctx, { confirm: fx.CONFIRM }, { kind: 'request-state' });
        if (got.pending) return got.pending;
        if (stateOf(ctx).kind !== 'request-state') return { ...text('requestState missing or not ours'), isError: true };
        return text('state-ok: requestState validated');
    });
    tool('test_input_required_result_multiple_inputs', 'MRTR: elicitation + sampling + roots in one round, with requestState.', async ctx => {
        const asks = { user_name: fx.ASK_NAME, greeting: fx.GREETING, client_roots: fx.ROOTS };
        const got = await gather(ctx, asks, { kind: 'multiple-inputs' });
        if (got.pending) return got.pending;
        const { user_name, greeting, client_roots } = got.answers;
        return text(`Name: ${answerText(user_name, 'name')}; Greeting: ${sampledText(greeting)}; Roots: ${rootCount(client_roots)}`);
    });
    tool('test_input_required_result_multi_round', 'MRTR: two rounds (`step1` name, then `step2` color), requestState changes per round.', async ctx => {
        const state = stateOf(ctx);
        let name;
        if (state.round === 2 && typeof state.name === 'string') {
            name = state.name;
        } else {
            const first = await gather(ctx, { step1: fx.STEP1 }, { round: 1 });
            if (first.pending) return first.pending;
            name = answerText(first.answers.step1, 'name');
        }
        const second = await gather(ctx, { step2: fx.STEP2 }, { round: 2, name });
        if (second.pending) return second.pending;
        return text(`Multi-round complete for ${name} who likes ${answerText(second.answers.step2, 'color')}`);
    });
    tool('test_input_required_result_tampered_state', 'MRTR: integrity-protected requestState (HMAC; a tampered one is -32602).', async ctx => {
        const got = await gather(ctx, { confirm: fx.CONFIRM }, { kind: 'tamper-test' });
        if (got.pending) return got.pending;
        if (stateOf(ctx).kind !== 'tamper-test') return { ...text('requestState integrity check failed'), isError: true };
        return text('integrity-ok: state verified');
    });
    tool('test_input_required_result_capabilities', 'MRTR: asks only for what the client declared (elicitation and/or sampling).', async ctx => {
        const asks = {};
        if (declared(ctx, 'elicitation')) asks.elicit_input = fx.CAP_ELICIT;
        if (declared(ctx, 'sampling')) asks.sample_input = fx.CAP_SAMPLE;
        if (Object.keys(asks).length === 0) return text('No supported capabilities declared');
        const got = await gather(ctx, asks, { kind: 'capabilities-test' });
        return got.pending ?? text(`capabilities-ok: received ${Object.keys(got.answers).join(',')}`);
    });

    // ---- resources
    mcp.registerResource(
        'static-text',
        'test://static-text',
        { description: 'A static text resource', mimeType: 'text/plain' },
        async uri => ({ contents: [{ uri: uri.href, mimeType: 'text/plain', text: fx.STATIC_TEXT }] })
    );
    mcp.registerResource(
        'static-binary',
        'test://static-binary',
        { description: 'A static binary resource (PNG)', mimeType: 'image/png' },
        async uri => ({ contents: [{ uri: uri.href, mimeType: 'image/png', blob: fx.PNG_B64 }] })
    );
    mcp.registerResource(
        'template',
        new ResourceTemplate('test://template/{id}/data', { list: undefined }),
        { description: 'Resource template with a parameter', mimeType: 'application/json' },
        async (uri, { id }) => ({
            contents: [
                {
                    uri: uri.href,
                    mimeType: 'application/json',
                    text: pyJson({ id, templateTest: true, data: `Data for ID: ${id}` })
                }
            ]
        })
    );
    mcp.registerResource(
        'watched-resource',
        'test://watched-resource',
        { description: 'A subscribable resource', mimeType: 'text/plain' },
        async uri => ({ contents: [{ uri: uri.href, mimeType: 'text/plain', text: fx.WATCHED_TEXT }] })
    );

    // ---- prompts
    mcp.registerPrompt('test_simple_prompt', { description: 'A simple prompt without arguments.' }, async () => ({
        messages: [{ role: 'user', content: { type: 'text', text: fx.SIMPLE_PROMPT } }]
    }));
    mcp.registerPrompt(
        'test_prompt_with_arguments',
        {
            description: 'A prompt with required arguments.',
            // completable: gives the server a completion/complete handler (empty values).
            argsSchema: z.object({ arg1: completable(z.string(), () => []), arg2: z.string() })
        },
        async ({ arg1, arg2 }) => ({
            messages: [{ role: 'user', content: { type: 'text', text: `Prompt with arguments: arg1='${arg1}', arg2='${arg2}'` } }]
        })
    );
    mcp.registerPrompt(
        'test_prompt_with_embedded_resource',
        { description: 'A prompt that includes an embedded resource.', argsSchema: z.object({ resourceUri: z.string() }) },
        async ({ resourceUri }) => ({
            messages: [
                { role: 'user', content: embedded(resourceUri, fx.EMBEDDED_PROMPT_TEXT, 'text/plain') },
                { role: 'user', content: { type: 'text', text: 'Please process the embedded resource above.' } }
            ]
        })
    );
    mcp.registerPrompt('test_prompt_with_image', { description: 'A prompt that includes image content.' }, async () => ({
        messages: [
            { role: 'user', content: { type: 'image', data: fx.PNG_B64, mimeType: 'image/png' } },
            { role: 'user', content: { type: 'text', text: 'Please analyze the image above.' } }
        ]
    }));
    mcp.registerPrompt('test_input_required_result_prompt', { description: 'MRTR on prompts/get: elicits `user_context` first.' }, async ctx => {
        const got = await gather(ctx, { user_context: fx.ASK_CONTEXT });
        if (got.pending) return got.pending;
        const context = answerText(got.answers.user_context, 'context');
        return { messages: [{ role: 'user', content: { type: 'text', text: `Prompt with context: ${context}` } }] };
    });

    // ---- resource subscriptions, as py2 advertises them: on the modern wire `resources.subscribe`
    // means subscriptions/listen takes resourceSubscriptions (the SDK's listen router serves it);
    // a legacy session gets resources/subscribe and unsubscribe, answered {}.
    mcp.server.registerCapabilities({ resources: { subscribe: true } });
    if (era === 'legacy') {
        mcp.server.setRequestHandler('resources/subscribe', async () => ({}));
        mcp.server.setRequestHandler('resources/unsubscribe', async () => ({}));
    }
    return mcp;
}

// ---- transports --------------------------------------------------------------

/** In-memory resumability for legacy SSE streams: priming events (id + retry) and replay. */
class MemoryEventStore {
    events = new Map();
    async storeEvent(streamId, message) {
        const id = `${streamId}.${randomUUID()}`;
        this.events.set(id, { streamId, message });
        return id;
    }
    async getStreamIdForEventId(id) {
        return this.events.get(id)?.streamId;
    }
    async replayEventsAfter(lastEventId, { send }) {
        const streamId = this.events.get(lastEventId)?.streamId;
        if (streamId === undefined) return '';
        let after = false;
        for (const [id, event] of this.events) {
            if (id === lastEventId) after = true;
            else if (after && event.streamId === streamId) await send(id, event.message);
        }
        return streamId;
    }
}

const jsonError = (status, code, message, id = null) =>
    new Response(JSON.stringify({ jsonrpc: '2.0', id, error: { code, message } }), {
        status,
        headers: { 'content-type': 'application/json' }
    });

/** Sessionful 2025-era serving (dual-era HTTP only): one transport + instance per Mcp-Session-Id. */
function legacySessions() {
    const sessions = new Map();
    const eventStore = new MemoryEventStore();
    return async request => {
        const sessionId = request.headers.get('mcp-session-id');
        if (sessionId) {
            const transport = sessions.get(sessionId);
            return transport ? transport.handleRequest(request) : jsonError(404, -32001, 'Session not found');
        }
        const transport = new WebStandardStreamableHTTPServerTransport({
            sessionIdGenerator: () => randomUUID(),
            eventStore,
            retryInterval: 1000,
            onsessioninitialized: id => sessions.set(id, transport),
            onsessionclosed: id => sessions.delete(id)
        });
        transport.onclose = () => transport.sessionId && sessions.delete(transport.sessionId);
        const server = createFixture({ era: 'legacy' });
        server.server.onerror = onerror;
        await server.connect(transport);
        return transport.handleRequest(request);
    };
}

function serveHttp(port) {
    httpHandler = createMcpHandler(createFixture, { legacy: 'reject', onerror });
    const legacy = modernOnly ? null : legacySessions();
    const allowedHosts = localhostAllowedHostnames();
    const allowedOrigins = localhostAllowedOrigins();

    const route = async request => {
        const refused = hostHeaderValidationResponse(request, allowedHosts) ?? originValidationResponse(request, allowedOrigins);
        if (refused) return refused;
        if (legacy && (await isLegacyRequest(request))) return legacy(request);
        if (modernOnly && (request.method === 'GET' || request.method === 'DELETE')) {
            return new Response('Method not allowed.', { status: 405, headers: { allow: 'POST' } });
        }
        return httpHandler.fetch(request);
    };

    // node:http in front of the fetch-shaped handlers: the body is read whole,
    // the response (JSON or an SSE stream) is piped back, and a client that
    // hangs up aborts the request.
    const server = createHttpServer(async (req, res) => {
        const abort = new AbortController();
        res.on('close', () => abort.abort());
        try {
            if (new URL(req.url, 'http://127.0.0.1').pathname !== '/mcp') {
                res.writeHead(404).end();
                return;
            }
            const chunks = [];
            for await (const chunk of req) chunks.push(chunk);
            const hasBody = req.method !== 'GET' && req.method !== 'HEAD';
            const request = new Request(`http://127.0.0.1:${port}${req.url}`, {
                method: req.method,
                headers: Object.entries(req.headers).flatMap(([k, v]) => (Array.isArray(v) ? v.map(x => [k, x]) : [[k, v]])),
                body: hasBody ? Buffer.concat(chunks) : undefined,
                signal: abort.signal
            });
            const response = await route(request);
            const headers = {};
            for (const [k, v] of response.headers) headers[k] = k in headers ? `${headers[k]}, ${v}` : v;
            res.writeHead(response.status, headers);
            if (response.body) {
                for await (const chunk of response.body) res.write(chunk);
            }
            res.end();
        } catch (err) {
            if (abort.signal.aborted) return;
            onerror(err);
            if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' });
            res.end(String(err?.message ?? err));
        }
    });
    server.on('error', err => {
        log(`${err?.code ?? ''} ${err?.message ?? err}`);
        process.exit(1);
    });
    server.listen(port, '127.0.0.1', () => log(`${modernOnly ? 'modern-only' : 'dual-era'} on http://127.0.0.1:${port}/mcp`));
}

for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => process.exit(0));
if (httpPort !== null) {
    serveHttp(httpPort);
} else {
    serveStdio(createFixture, { legacy: modernOnly ? 'reject' : 'serve', onerror });
}
