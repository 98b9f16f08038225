// Lockdown of a fresh V8 context, run once by the prelude after it installed its helpers
// (see prelude.js and runtime.py).
//
// Every evaluation of every workflow instance shares this context, so nothing in it that
// user code can reach may be changeable: a patched iterator prototype would record what
// later transforms iterate, a patched method would run inside another instance's
// transform.  Hence:
// - no code generation from strings (Function, eval, the constructors of function kinds);
// - no deferred execution outside an evaluation's time limit: timers, Atomics.waitAsync,
//   FinalizationRegistry, AsyncDisposableStack and Array.fromAsync are removed, and the
//   global Promise is hidden (the prelude hands it only to transforms that name it, and
//   the engine then waits for their promise jobs inside the time limit);
// - no state carried from one evaluation to the next through RegExp's legacy statics
//   (RegExp.$1, lastMatch, input ...), which are removed;
// - every object reachable from the global object AND from the hidden intrinsics
//   (iterator, generator and async-function prototypes, %ThrowTypeError%, ...) is frozen,
//   following prototypes, data properties and accessor functions alike.
(function lockdown(G) {
  'use strict';
  const F = Function;
  const getProto = Object.getPrototypeOf;
  const getDesc = Object.getOwnPropertyDescriptor;
  const ownKeys = Reflect.ownKeys;
  const freeze = Object.freeze;
  const defineProperty = Object.defineProperty;

  // Shared objects user code reaches without naming them on the global object.  Each is
  // made once here; what matters is its prototype chain and accessors (an error's
  // `stack` accessor pair is shared by every error).
  const gen = function* () {};
  const agen = async function* () {};
  const roots = [
    G, gen, gen(), agen, agen(), async function () {}, async () => 1, (async () => 1)(),
    [][Symbol.iterator](), new Map()[Symbol.iterator](), new Set()[Symbol.iterator](),
    ''[Symbol.iterator](), /a/g[Symbol.matchAll]('a'), new Uint8Array(1)[Symbol.iterator](),
    (function () { return arguments; })(), getDesc(F.prototype, 'caller'), F, new Error('e'),
  ];
  if (typeof G.Iterator === 'function') {
    roots.push(G.Iterator.prototype.map.call([].values(), (x) => x));
    if (typeof G.Iterator.from === 'function') roots.push(G.Iterator.from({ next() { return { done: true }; } }));
  }
  if (G.Intl && typeof G.Intl.Segmenter === 'function') {
    const segments = new G.Intl.Segmenter().segment('a');
    roots.push(segments, segments[Symbol.iterator]());
  }

  // Code generation from strings: every function kind's constructor throws.
  const blocked = function Function() {
    throw new EvalError('code generation from strings is disabled in workflow expressions');
  };
  blocked.prototype = F.prototype;
  for (const proto of [F.prototype, getProto(async function () {}), getProto(gen), getProto(agen)]) {
    defineProperty(proto, 'constructor', { value: blocked, writable: false, configurable: false });
  }
  G.Function = blocked;

  // Deferred execution and host leftovers.  Some are non-configurable (mini-racer's
  // timers): then they are made inert.  Their objects stay in `roots` and are frozen.
  const removed = ['console', 'setTimeout', 'clearTimeout', '__timer_manager', 'WebAssembly', 'eval', 'Promise',
    'FinalizationRegistry', 'AsyncDisposableStack'];
  for (const name of removed) {
    if (name in G) roots.push(G[name]);
    if (!Reflect.deleteProperty(G, name)) G[name] = undefined;
  }
  for (const [owner, name] of [[G.Atomics, 'waitAsync'], [Array, 'fromAsync']]) {
    if (owner && name in owner) Reflect.deleteProperty(owner, name);
  }
  for (const key of ownKeys(RegExp)) {
    const d = getDesc(RegExp, key);
    // The legacy statics are the accessors keyed by name ($1, lastMatch, input ...);
    // Symbol.species is an accessor too and stays.
    if (typeof key === 'string' && d && (d.get || d.set)) Reflect.deleteProperty(RegExp, key);
  }

  // Deep freeze, iteratively (the graph is a few thousand objects, deep chains included).
  const seen = new Set();
  const stack = roots.slice();
  while (stack.length > 0) {
    const o = stack.pop();
    if ((typeof o !== 'object' && typeof o !== 'function') || o === null || seen.has(o)) continue;
    seen.add(o);
    for (const key of ownKeys(o)) {
      const d = getDesc(o, key);
      if (d === undefined) continue;
      if ('value' in d) stack.push(d.value);
      else stack.push(d.get, d.set);
    }
    stack.push(getProto(o));
    freeze(o);
  }
  return seen.size;
})
