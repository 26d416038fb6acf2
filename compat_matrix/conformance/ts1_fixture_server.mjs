// Conformance fixture server on @modelcontextprotocol/sdk 1.32.2 (McpServer): legacy era only.
//
//   node compat_matrix/conformance/ts1_fixture_server.mjs              # stdio
//   node compat_matrix/conformance/ts1_fixture_server.mjs --http PORT  # 127.0.0.1:PORT/mcp
//
// The TypeScript twin of py1_fixture_server.py: the same tools, resources and
// prompts, and the tools that need the client push real server-to-client
// requests (`elicitation/create`, `sampling/createMessage`, `roots/list`)
// on the call's own stream, asking the same questions in the same order.
// Texts, payloads and request shapes come from fixture_data.json, which
// `python3 fixture_data.py --json` writes (one source of truth; a test checks
// the two are in sync).
//
// `--http PORT` serves Streamable HTTP with stateful sessions (Mcp-Session-Id;
// one McpServer + StreamableHTTPServerTransport per session; SSE on POST, the
// GET stream, DELETE), behind a Host/Origin check that only lets localhost in
// (403 otherwise), as py1's FastMCP does. Stdout carries only the protocol in
// stdio mode; diagnostics go to stderr.
import { randomUUID } from 'node:crypto';
import { createServer as createHttpServer } from 'node:http';
import {
    answerText,
    elicitationSummary,
    form,
    fx,
    pyJson as pyDumps,
    requirePeer,
    rootCount,
    sample,
    sampledText
} from './fixture_data.mjs';

const require = requirePeer;

const { McpServer, ResourceTemplate } = require('@modelcontextprotocol/sdk/server/mcp.js');
const { completable } = require('@modelcontextprotocol/sdk/server/completable.js');
const { StdioServerTransport } = require('@modelcontextprotocol/sdk/server/stdio.js');
const { StreamableHTTPServerTransport } = require('@modelcontextprotocol/sdk/server/streamableHttp.js');
const {
    isInitializeRequest,
    SubscribeRequestSchema,
    UnsubscribeRequestSchema
} = require('@modelcontextprotocol/sdk/types.js');
const { z } = require('zod');


function log(...parts) {
    process.stderr.write(`[ts1-fixture] ${parts.join(' ')}\n`);
}

// ---- content builders --------------------------------------------------------

const text = value => ({ type: 'text', text: value });
const image = () => ({ type: 'image', data: fx.PNG_B64, mimeType: 'image/png' });
const embedded = (uri, body, mimeType) => ({ type: 'resource', resource: { uri, mimeType, text: body } });
const sleep = ms => new Promise(done => setTimeout(done, ms));

// ---- the server --------------------------------------------------------------

function createFixtureServer() {
    const server = new McpServer(
        { name: 'ts1-conformance-fixture', version: '1.32.2' },
        {
            instructions: 'Conformance fixtures (legacy).',
            capabilities: { logging: {}, resources: { subscribe: true } }
        }
    );
    const low = server.server;

    /** Send one server-to-client request on the call's stream; its result. */
    async function push(extra, request) {
        const options = { relatedRequestId: extra.requestId };
        switch (request.method) {
            case 'elicitation/create':
                return low.elicitInput(request.params, options);
            case 'sampling/createMessage':
                return low.createMessage(request.params, options);
            case 'roots/list':
                return low.listRoots(request.params, options);
            default:
                throw new Error(`not a client request: ${request.method}`);
        }
    }

    /** A notifications/message on the call's stream, unless the session's level filters it. */
    async function logInfo(extra, data) {
        if (!low.isMessageIgnored('info', extra.sessionId)) {
            await extra.sendNotification({ method: 'notifications/message', params: { level: 'info', data } });
        }
    }

    async function progress(extra, value, total, message) {
        const progressToken = extra._meta?.progressToken;
        if (progressToken === undefined) return;
        const params = { progressToken, progress: value, total };
        if (message !== undefined) params.message = message;
        await extra.sendNotification({ method: 'notifications/progress', params });
    }

    const tool = (name, description, inputSchema, handler) =>
        server.registerTool(name, inputSchema ? { description, inputSchema } : { description }, handler);
    // A tool without arguments gets `(extra)`, one with arguments `(args, extra)`.
    const says = value => ({ content: [text(value)] });

    // ---- plain content tools ---------------------------------------------

    tool('test_simple_text', 'Tests simple text content response.', null, async () => says(fx.SIMPLE_TEXT));
    tool('test_image_content', 'Tests image content response.', null, async () => ({ content: [image()] }));
    tool('test_audio_content', 'Tests audio content response.', null, async () => ({
        content: [{ type: 'audio', data: fx.WAV_B64, mimeType: 'audio/wav' }]
    }));
    tool('test_embedded_resource', 'Tests embedded resource content response.', null, async () => ({
        content: [embedded('test://embedded-resource', fx.EMBEDDED_TEXT, 'text/plain')]
    }));
    tool(
        'test_multiple_content_types',
        'Tests response with multiple content types (text, image, resource).',
        null,
        async () => ({
            content: [
                text('Multiple content types test:'),
                image(),
                embedded('test://mixed-content-resource', fx.MIXED_JSON, 'application/json')
            ]
        })
    );
    tool('test_error_handling', 'Tests error response handling (a result with isError: true).', null, async () => ({
        content: [text(fx.ERROR_TEXT)],
        isError: true
    }));
    tool('test_tool_with_logging', 'Emits three info log messages during execution.', null, async extra => {
        for (const message of ['Tool execution started', 'Tool processing data', 'Tool execution completed']) {
            await logInfo(extra, message);
            await sleep(50);
        }
        return says('Tool with logging executed successfully');
    });
    tool(
        'test_tool_with_progress',
        'Reports progress 0, 50, 100 of 100 (when the request has a progressToken).',
        null,
        async extra => {
            for (const step of [0, 50, 100]) {
                await progress(extra, step, 100, `Completed step ${step} of 100`);
                await sleep(50);
            }
            return says('Progress reported');
        }
    );
    tool('test_reconnection', 'SEP-1699 reconnection target (the stream is not closed here).', null, async () => {
        await sleep(100);
        return says('Reconnection test completed successfully.');
    });
    tool(
        'test_logging_tool',
        'Logs once (a legacy server logs regardless of any per-request logLevel).',
        null,
        async extra => {
            await logInfo(extra, 'Diagnostic trace logging activated');
            return says('Logging evaluated');
        }
    );
    tool('test_streaming_elicitation', 'Diagnostic: reports progress, then completes.', null, async extra => {
        await progress(extra, 50, 100);
        return says('Streaming complete');
    });
    tool('test_trigger_tool_change', 'Sends notifications/tools/list_changed.', null, async () => {
        server.sendToolListChanged();
        return says('Mutation triggered');
    });
    tool('test_trigger_prompt_change', 'Sends notifications/prompts/list_changed.', null, async () => {
        server.sendPromptListChanged();
        return says('Mutation triggered');
    });
    tool(
        'test_header_param',
        'SEP-2243 custom header target (a legacy server does not validate Mcp-Param headers).',
        { region: z.string().default('eu').meta({ 'x-mcp-header': 'Region' }) },
        async ({ region }) => says(`region=${region}`)
    );
    // zod validates what the handler reads; the listed inputSchema is exactly
    // fixture_data's (zod's .meta() keys override the generated ones).
    tool(
        'json_schema_2020_12_tool',
        'Tool with JSON Schema 2020-12 features for conformance testing (SEP-1613).',
        z
            .object({
                name: z.string().nullish(),
                address: z.record(z.string(), z.unknown()).nullish()
            })
            .meta(fx.JSON_SCHEMA_2020_12),
        async ({ name, address }) =>
            says(`JSON Schema 2020-12 tool called with: ${pyDumps({ name: name ?? null, address: address ?? null })}`)
    );

    // ---- tools that push requests to the client ----------------------------

    tool(
        'test_sampling',
        'Tests server-initiated sampling (LLM completion request).',
        { prompt: z.string() },
        async ({ prompt }, extra) => says(`LLM response: ${sampledText(await push(extra, sample(prompt, 100)))}`)
    );
    tool(
        'test_elicitation',
        'Tests server-initiated elicitation (user input request).',
        { message: z.string() },
        async ({ message }, extra) => {
            const answer = await push(extra, form(message, fx.ELICIT_RESPONSE_PROPS, ['response']));
            return says(`User response: ${elicitationSummary(answer)}`);
        }
    );
    tool('test_elicitation_sep1034_defaults', 'Tests elicitation with default values per SEP-1034.', null, async extra => {
        const answer = await push(extra, form(fx.SEP1034_MESSAGE, fx.SEP1034_PROPS, []));
        return says(`Elicitation completed: ${elicitationSummary(answer)}`);
    });
    tool(
        'test_elicitation_sep1330_enums',
        'Tests elicitation with enum schema improvements per SEP-1330.',
        null,
        async extra => {
            const answer = await push(extra, form(fx.SEP1330_MESSAGE, fx.SEP1330_PROPS, []));
            return says(`Elicitation completed: ${elicitationSummary(answer)}`);
        }
    );
    tool(
        'test_missing_capability',
        'Needs sampling; pushed even to a client that did not declare it (as legacy servers do).',
        null,
        async extra => {
            await push(extra, sample('Say hello', 10));
            return says('Success');
        }
    );
    tool(
        'test_input_required_result_elicitation',
        'MRTR fixture, legacy form: pushes the `user_name` question.',
        null,
        async extra => says(`Hello, ${answerText(await push(extra, fx.ASK_NAME), 'name')}!`)
    );
    tool(
        'test_input_required_result_sampling',
        'MRTR fixture, legacy form: pushes the capital question.',
        null,
        async extra => says(`Sampling result: ${sampledText(await push(extra, fx.CAPITAL))}`)
    );
    tool(
        'test_input_required_result_list_roots',
        'MRTR fixture, legacy form: pushes roots/list.',
        null,
        async extra => says(`Found ${rootCount(await push(extra, fx.ROOTS))} root(s)`)
    );
    tool(
        'test_input_required_result_request_state',
        'MRTR fixture, legacy form: one confirmation (the gateway supplies requestState).',
        null,
        async extra => {
            await push(extra, fx.CONFIRM);
            return says('state-ok: requestState validated');
        }
    );
    tool(
        'test_input_required_result_multiple_inputs',
        'MRTR fixture, legacy form: elicitation, sampling and roots, one after another.',
        null,
        async extra => {
            const name = answerText(await push(extra, fx.ASK_NAME), 'name');
            const greeting = sampledText(await push(extra, fx.GREETING));
            const roots = rootCount(await push(extra, fx.ROOTS));
            return says(`Name: ${name}; Greeting: ${greeting}; Roots: ${roots}`);
        }
    );
    tool('test_input_required_result_multi_round', 'MRTR fixture, legacy form: step 1 then step 2.', null, async extra => {
        const name = answerText(await push(extra, fx.STEP1), 'name');
        const color = answerText(await push(extra, fx.STEP2), 'color');
        return says(`Multi-round complete for ${name} who likes ${color}`);
    });
    tool(
        'test_input_required_result_tampered_state',
        'MRTR fixture, legacy form: one confirmation (integrity is the gateway\'s requestState).',
        null,
        async extra => {
            await push(extra, fx.CONFIRM);
            return says('integrity-ok: state verified');
        }
    );
    tool(
        'test_input_required_result_capabilities',
        'MRTR fixture, legacy form: asks only for what the client declared.',
        null,
        async extra => {
            const declared = low.getClientCapabilities() ?? {};
            const received = [];
            if (declared.elicitation) {
                await push(extra, fx.CAP_ELICIT);
                received.push('elicit_input');
            }
            if (declared.sampling) {
                await push(extra, fx.CAP_SAMPLE);
                received.push('sample_input');
            }
            return says(
                received.length ? `capabilities-ok: received ${received.join(',')}` : 'No supported capabilities declared'
            );
        }
    );

    // ---- resources -----------------------------------------------------------

    server.registerResource(
        'static-text',
        'test://static-text',
        { description: 'A static text resource', mimeType: 'text/plain' },
        async uri => ({ contents: [{ uri: uri.href, mimeType: 'text/plain', text: fx.STATIC_TEXT }] })
    );
    server.registerResource(
        'static-binary',
        'test://static-binary',
        { description: 'A static binary resource (PNG)', mimeType: 'image/png' },
        async uri => ({ contents: [{ uri: uri.href, mimeType: 'image/png', blob: fx.PNG_B64 }] })
    );
    server.registerResource(
        'template',
        new ResourceTemplate('test://template/{id}/data', { list: undefined, complete: { id: () => [] } }),
        { description: 'Resource template with a parameter', mimeType: 'application/json' },
        async (uri, { id }) => ({
            contents: [
                {
                    uri: uri.href,
                    mimeType: 'application/json',
                    text: pyDumps({ id, templateTest: true, data: `Data for ID: ${id}` })
                }
            ]
        })
    );
    server.registerResource(
        'watched-resource',
        'test://watched-resource',
        { description: 'A subscribable resource', mimeType: 'text/plain' },
        async uri => ({ contents: [{ uri: uri.href, mimeType: 'text/plain', text: fx.WATCHED_TEXT }] })
    );
    low.setRequestHandler(SubscribeRequestSchema, async () => ({}));
    low.setRequestHandler(UnsubscribeRequestSchema, async () => ({}));

    // ---- prompts (completion/complete: the SDK's handler, empty completers) ---

    const user = content => ({ role: 'user', content });
    const noCompletions = () => [];
    server.registerPrompt('test_simple_prompt', { description: 'A simple prompt without arguments.' }, async () => ({
        messages: [user(text(fx.SIMPLE_PROMPT))]
    }));
    server.registerPrompt(
        'test_prompt_with_arguments',
        {
            description: 'A prompt with required arguments.',
            argsSchema: { arg1: completable(z.string(), noCompletions), arg2: completable(z.string(), noCompletions) }
        },
        async ({ arg1, arg2 }) => ({
            messages: [user(text(`Prompt with arguments: arg1='${arg1}', arg2='${arg2}'`))]
        })
    );
    server.registerPrompt(
        'test_prompt_with_embedded_resource',
        { description: 'A prompt that includes an embedded resource.', argsSchema: { resourceUri: z.string() } },
        async ({ resourceUri }) => ({
            messages: [
                user(embedded(resourceUri, fx.EMBEDDED_PROMPT_TEXT, 'text/plain')),
                user(text('Please process the embedded resource above.'))
            ]
        })
    );
    server.registerPrompt('test_prompt_with_image', { description: 'A prompt that includes image content.' }, async () => ({
        messages: [user(image()), user(text('Please analyze the image above.'))]
    }));
    server.registerPrompt(
        'test_input_required_result_prompt',
        { description: 'MRTR fixture, legacy form: pushes the `user_context` question during prompts/get.' },
        async extra => {
            const context = answerText(await push(extra, fx.ASK_CONTEXT), 'context');
            return { messages: [user(text(`Prompt with context: ${context}`))] };
        }
    );

    return server;
}

// ---- transports ----------------------------------------------------------------

async function serveStdio() {
    const server = createFixtureServer();
    const transport = new StdioServerTransport();
    transport.onclose = () => process.exit(0);
    process.stdin.on('end', () => process.exit(0));
    await server.connect(transport);
    log('serving on stdio');
}

const LOCAL_HOSTNAMES = new Set(['127.0.0.1', 'localhost', '[::1]']);

/** DNS-rebinding protection: Host (and Origin, when sent) must name this machine. */
function localhostOnly(req) {
    const hostname = host => {
        try {
            return new URL(`http://${host}`).hostname;
        } catch {
            return null;
        }
    };
    if (!LOCAL_HOSTNAMES.has(hostname(req.headers.host ?? ''))) {
        return `Invalid Host header: ${req.headers.host}`;
    }
    const origin = req.headers.origin;
    if (origin !== undefined) {
        let name = null;
        try {
            name = new URL(origin).hostname;
        } catch {
            /* invalid */
        }
        if (!LOCAL_HOSTNAMES.has(name)) return `Invalid Origin header: ${origin}`;
    }
    return null;
}

function jsonRpcError(res, status, code, message) {
    res.writeHead(status, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }));
}

async function readJson(req) {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

async function serveHttp(port) {
    const sessions = new Map(); // Mcp-Session-Id -> StreamableHTTPServerTransport

    async function handle(req, res) {
        const url = new URL(req.url ?? '/', 'http://127.0.0.1');
        if (url.pathname !== '/mcp') return jsonRpcError(res, 404, -32000, 'Not Found');
        const refused = localhostOnly(req);
        if (refused) return jsonRpcError(res, 403, -32000, refused);

        const sessionId = req.headers['mcp-session-id'];
        let body;
        if (req.method === 'POST') {
            try {
                body = await readJson(req);
            } catch {
                return jsonRpcError(res, 400, -32700, 'Parse error');
            }
        }
        if (typeof sessionId === 'string') {
            const transport = sessions.get(sessionId);
            if (!transport) return jsonRpcError(res, 404, -32001, 'Session not found');
            return transport.handleRequest(req, res, body);
        }
        if (req.method === 'POST' && isInitializeRequest(body)) {
            const transport = new StreamableHTTPServerTransport({
                sessionIdGenerator: () => randomUUID(),
                onsessioninitialized: id => {
                    sessions.set(id, transport);
                    log(`session ${id} opened`);
                }
            });
            transport.onclose = () => {
                if (transport.sessionId && sessions.delete(transport.sessionId)) {
                    log(`session ${transport.sessionId} closed`);
                }
            };
            await createFixtureServer().connect(transport);
            return transport.handleRequest(req, res, body);
        }
        return jsonRpcError(res, 400, -32000, 'Bad Request: No valid session ID provided');
    }

    const http = createHttpServer((req, res) => {
        handle(req, res).catch(error => {
            log(`request failed: ${error?.stack ?? error}`);
            if (!res.headersSent) jsonRpcError(res, 500, -32603, 'Internal error');
            else res.end();
        });
    });
    await new Promise(done => http.listen(port, '127.0.0.1', done));
    log(`serving Streamable HTTP on http://127.0.0.1:${port}/mcp`);

    const stop = async () => {
        for (const transport of sessions.values()) await transport.close().catch(() => {});
        http.close();
        http.closeAllConnections?.();
        process.exit(0);
    };
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
}

const httpAt = process.argv.indexOf('--http');
const main = httpAt >= 0 ? serveHttp(Number(process.argv[httpAt + 1])) : serveStdio();
main.catch(error => {
    log(`fatal: ${error?.stack ?? error}`);
    process.exit(1);
});
