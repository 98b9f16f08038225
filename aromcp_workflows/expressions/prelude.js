// Runtime installed once in every fresh V8 context (see runtime.py).
//
// It keeps a registry of compiled functions (each distinct expression or transform is
// compiled once, by `def`), evaluates a batch of independent expressions (`run`) or a
// chain of computed fields in topological order with cut-off (`chain`) in ONE crossing,
// and returns one JSON text.  Then it locks the context down: no code generation from
// strings, frozen intrinsics and global object, no console or timers (lockdown.js).
//
// Python calls it with a random token; every entry point demands that token, so user
// code (which can see the global `__aro`) cannot redefine compiled functions or touch
// the value cache of other workflows.
(function (TOKEN, LOCKDOWN) {
  'use strict';
  const G = globalThis;
  const F = Function;
  const HiddenPromise = Promise;
  const apply = Reflect.apply;
  const stringify = JSON.stringify;
  const parse = JSON.parse;
  const dateNow = Date.now;
  const random = Math.random;
  const hasOwn = Object.hasOwn;
  const defineProperty = Object.defineProperty;
  const fns = new Map();
  let reached = { i: -1, first: -1, done: [] };

  class CompileError extends Error {}

  // Texts of computed values kept between calls (LRU, bounded by total characters and by
  // entries), so an unchanged 10,000-item value is not sent into V8 again on every
  // recompute.  The entry bound keeps V8 from growing with the number of instances: each
  // instance's values have keys of their own, and 10,000 waiting instances with small
  // values stayed far below the character bound while adding ~0.5 KB each.  An evicted
  // value costs its instance one resend at its next recompute.
  const cache = new Map();
  let cacheChars = 0;
  const CACHE_LIMIT = 24 * 1024 * 1024;
  const CACHE_ENTRIES = 2048;
  function cacheGet(key) {
    const s = cache.get(key);
    if (s !== undefined) {
      cache.delete(key);
      cache.set(key, s);
    }
    return s;
  }
  function cacheSet(key, s) {
    const old = cache.get(key);
    if (old !== undefined) cacheChars -= old.length;
    cache.delete(key);
    if (s.length > CACHE_LIMIT / 4) return;
    cache.set(key, s);
    cacheChars += s.length;
    for (const [k, v] of cache) {
      if (cacheChars <= CACHE_LIMIT && cache.size <= CACHE_ENTRIES) break;
      cache.delete(k);
      cacheChars -= v.length;
    }
  }

  function describe(e) {
    try {
      if (e instanceof CompileError) return String(e.message);
      if (e instanceof Error) return String(e.name) + ': ' + String(e.message);
      return 'uncaught ' + (typeof e === 'string' ? e : String(stringify(e)));
    } catch (_) {
      return 'uncaught exception';
    }
  }

  // Compile a source the way the engine runs it: an expression, else (transforms only)
  // the expression without trailing semicolons, else a function body.  [fn, error].
  function compile(params, src, mode) {
    const exprBody = (s) => '"use strict";\nreturn (' + s + '\n);';
    try {
      return [new F(...params, exprBody(src)), null];
    } catch (e1) {
      if (mode === 'expr') return [null, e1];
      const stripped = src.replace(/[\s;]+$/, '');
      try {
        if (stripped === src) throw e1;
        return [new F(...params, exprBody(stripped)), null];
      } catch (e2) {
        try {
          return [new F(...params, '"use strict";\n{\n' + src + '\n}'), null];
        } catch (e3) {
          return [null, e3];
        }
      }
    }
  }

  // The global Promise is hidden (lockdown.js): a source that names it gets it as a
  // leading parameter, and Python waits for its promise jobs (runtime.py, `fence`).
  function def(id, names, src, mode) {
    const withPromise = src.indexOf('Promise') >= 0 && names.indexOf('Promise') < 0;
    const params = withPromise ? ['Promise'].concat(names) : names;
    const made = compile(params, src, mode);
    let fn = made[0];
    if (fn !== null && withPromise) {
      const inner = fn;
      fn = function (...args) {
        return apply(inner, this, [HiddenPromise].concat(args));
      };
    }
    fns.set(id, fn !== null ? fn : describe(made[1]));
  }

  // Validation: compile each [source, mode] and report its syntax error (or null).
  // Nothing is run and nothing is kept.
  function check(meta) {
    const out = [];
    for (const item of meta.sources) {
      const made = compile([], item[0], item[1]);
      out.push(made[0] !== null ? null : describe(made[1]));
    }
    return stringify(out);
  }

  // A cell holds one value handed to user code.  The first taker gets the value itself;
  // later takers get a fresh copy (parsed from text), so a transform that mutates its
  // input cannot change what the next one sees.
  function cell(v, multi) {
    return { v: v, s: undefined, used: false, multi: multi };
  }
  function take(c) {
    if (c === undefined) return undefined;
    if (!c.used) {
      c.used = true;
      if (c.multi && c.s === undefined && c.v !== undefined) c.s = stringify(c.v);
      return c.v;
    }
    if (c.s === undefined) return c.v;
    return parse(c.s);
  }
  function cellText(c) {
    if (c === undefined) return undefined;
    if (c.s === undefined && c.v !== undefined && !c.used) c.s = stringify(c.v);
    return c.s;
  }

  function resolve(src, ctx) {
    if (src === null) return undefined;
    if (typeof src === 'number') return take(ctx.cells[src]);
    if (src.c !== undefined) return take(ctx.cur[src.c]);
    if (src.x !== undefined) return ctx.output;
    if (src.o !== undefined) {
      const o = {};
      for (const pair of src.o) {
        const v = resolve(pair[1], ctx);
        if (v !== undefined) {
          defineProperty(o, pair[0], { value: v, writable: true, enumerable: true, configurable: true });
        }
      }
      return o;
    }
    if (src.a !== undefined) return src.a.map((s) => resolve(s, ctx));
    if (src.p !== undefined) {
      let v = resolve(src.g, ctx);
      for (const k of src.p) {
        if (v === null || v === undefined || !hasOwn(Object(v), k)) return undefined;
        v = v[k];
      }
      return v;
    }
    throw new Error('internal: bad argument source ' + stringify(src));
  }

  function call(fnId, argSrcs, thisSrc, ctx) {
    const fn = fns.get(fnId);
    if (fn === undefined) throw new CompileError('internal: function ' + fnId + ' not installed');
    if (typeof fn !== 'function') throw new CompileError(fn);
    const args = argSrcs.map((s) => resolve(s, ctx));
    return fn.apply(thisSrc === null ? undefined : resolve(thisSrc, ctx), args);
  }

  function errorPart(kind, msg) {
    return '[2,' + stringify(kind) + ',' + stringify(msg) + ']';
  }

  function kindOf(e) {
    if (e instanceof CompileError) return 'syntax';
    if (e instanceof RangeError && /Invalid (string|array) length|Array buffer allocation/.test(String(e.message))) {
      return 'memory';
    }
    return 'runtime';
  }

  // Serialize one output; [text|undefined, errorKind, errorMessage].
  function encode(out, max) {
    if (typeof out === 'string' && out.length > max) {
      return [undefined, 'memory', 'result too large: ' + out.length + ' characters (limit ' + max + ')'];
    }
    let s;
    try {
      s = stringify(out);
    } catch (e) {
      return [undefined, kindOf(e), 'result is not JSON-serializable: ' + describe(e)];
    }
    if (s !== undefined && s.length > max) {
      return [undefined, 'memory', 'result too large: ' + s.length + ' characters (limit ' + max + ')'];
    }
    return [s, null, null];
  }

  function newCtx(vals, multi) {
    const cells = vals.map((v) => cell(v, false));
    for (const i of multi) cells[i].multi = true;
    return { cells: cells, cur: Object.create(null), output: undefined };
  }

  // Independent expressions: [fnId, argSources, thisSource] each.
  function run(meta, vals) {
    const ctx = newCtx(vals, meta.multi);
    const parts = [];
    reached = { i: -1, first: meta.start, done: parts };
    for (let i = meta.start; i < meta.items.length; i++) {
      reached.i = i;
      const it = meta.items[i];
      let out;
      try {
        out = call(it[0], it[1], it[2], ctx);
      } catch (e) {
        parts.push(errorPart(kindOf(e), describe(e)));
        continue;
      }
      const enc = encode(out, meta.max);
      if (enc[1] !== null) parts.push(errorPart(enc[1], enc[2]));
      else parts.push(enc[0] === undefined ? '[1]' : '[0,' + enc[0] + ']');
    }
    return '[' + parts.join(',') + ']';
  }

  // Computed fields in topological order.  Item: {n name, f fnId, a args, t this,
  // v [fnId,args,this]|null validate, p policy, fb fallback cell index|null, d dependents}.
  // Part per item: [3] skipped | [0,null,ek,em,ms] unchanged | [1,[v]|[],ek,em,ms] changed
  // | [2,kind,msg,ms] failed with policy propagate (the chain stops there).
  function chain(meta, vals) {
    const ctx = newCtx(vals, meta.multi);
    // meta.computed: [name, cell index | null, cache key | null].  A null index means
    // "the value is in the cache under this key" (it stayed in V8 from an earlier call);
    // a miss answers {"miss": key} and Python resends the values inline.
    for (const e of meta.computed) {
      if (e[1] === null) {
        const s = cacheGet(e[2]);
        if (s === undefined) return '{"miss":' + stringify(e[2]) + '}';
        ctx.cur[e[0]] = { v: undefined, s: s, used: true, multi: true };
      } else {
        const c = ctx.cells[e[1]];
        c.multi = true;
        ctx.cur[e[0]] = c;
        if (e[2] !== null && c.v !== undefined) {
          c.s = stringify(c.v);
          cacheSet(e[2], c.s);
        }
      }
    }
    const dirty = new Set(meta.dirty);
    const parts = [];
    reached = { i: -1, first: -1, done: parts };
    let ran = 0;
    for (let i = meta.start; i < meta.items.length; i++) {
      if (!dirty.has(i)) {
        parts.push('[3]');
        continue;
      }
      if (meta.limit > 0 && ran >= meta.limit) break;
      reached.i = i;
      if (reached.first < 0) reached.first = i;
      ran++;
      const it = meta.items[i];
      const t0 = dateNow();
      let out;
      let s;
      let err = null;
      if (meta.inject !== null && meta.inject[0] === i) {
        err = [meta.inject[1], meta.inject[2]];
      } else {
        try {
          out = call(it.f, it.a, it.t, ctx);
          const enc = encode(out, meta.max);
          if (enc[1] !== null) {
            err = [enc[1], enc[2]];
          } else {
            s = enc[0];
            if (it.v !== null) {
              ctx.output = out;
              const ok = call(it.v[0], it.v[1], it.v[2], ctx);
              ctx.output = undefined;
              if (!ok) err = ['validation', 'validate returned ' + String(stringify(ok))];
            }
          }
        } catch (e) {
          err = [kindOf(e), describe(e)];
        }
      }
      if (err !== null) {
        if (it.p === 'propagate') {
          parts.push('[2,' + stringify(err[0]) + ',' + stringify(err[1]) + ',' + (dateNow() - t0) + ']');
          return '[' + parts.join(',') + ']';
        }
        if (it.p === 'use_fallback') {
          const fb = it.fb === null ? undefined : ctx.cells[it.fb];
          out = fb === undefined ? undefined : fb.v;
          s = cellText(fb);
        } else {
          parts.push('[0,null,' + stringify(err[0]) + ',' + stringify(err[1]) + ',' + (dateNow() - t0) + ']');
          continue;
        }
      }
      const ek = err === null ? 'null' : stringify(err[0]);
      const em = err === null ? 'null' : stringify(err[1]);
      const ms = dateNow() - t0;
      if (s === cellText(ctx.cur[it.n])) {
        parts.push('[0,null,' + ek + ',' + em + ',' + ms + ']');
        continue;
      }
      ctx.cur[it.n] = { v: out, s: s, used: false, multi: true };
      if (it.ok && cache.has(it.ok)) {
        cacheChars -= cache.get(it.ok).length;
        cache.delete(it.ok);
      }
      if (it.nk && s !== undefined) cacheSet(it.nk, s);
      for (const d of it.d) dirty.add(d);
      parts.push('[1,' + (s === undefined ? '[]' : '[' + s + ']') + ',' + ek + ',' + em + ',' + ms + ']');
    }
    return '[' + parts.join(',') + ']';
  }

  function reachedText() {
    return '{"i":' + reached.i + ',"first":' + reached.first + ',"done":[' + reached.done.join(',') + ']}';
  }

  function now() {
    return new Date(dateNow()).toISOString();
  }
  function uuid() {
    return 'xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx'.replace(/[xy]/g, (c) => {
      const r = (random() * 16) | 0;
      return (c === 'x' ? r : (r & 0x3) | 0x8).toString(16);
    });
  }

  // The `path_to_key` filter as a function, for use inside expressions
  // (`file_results[path_to_key(item)]`); same rule as the Python filter.
  function path_to_key(v) {
    const text = v === undefined || v === null ? '' : typeof v === 'object' ? stringify(v) : String(v);
    return text.replace(/[^A-Za-z0-9_-]+/g, '_');
  }

  // ---- lockdown (lockdown.js: no code generation, no deferred jobs, all frozen) -----
  function guarded(fn) {
    return function (token, a, b, c, d) {
      if (token !== TOKEN) throw new Error('__aro is internal to the workflow engine');
      return fn(a, b, c, d);
    };
  }
  const api = Object.freeze({
    def: guarded(def), run: guarded(run), chain: guarded(chain), check: guarded(check),
    reached: guarded(reachedText),
  });
  defineProperty(G, '__aro', { value: api, writable: false, enumerable: false, configurable: false });
  defineProperty(G, 'now', { value: now, writable: false, enumerable: false, configurable: false });
  defineProperty(G, 'uuid', { value: uuid, writable: false, enumerable: false, configurable: false });
  defineProperty(G, 'path_to_key', { value: path_to_key, writable: false, enumerable: false, configurable: false });
  LOCKDOWN(G);
  return 'ok';
})
