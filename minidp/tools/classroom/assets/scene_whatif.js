// Scene "whatif": the lessons' formulas (and the planner's numbers) for any model, world and
// cluster, live: sliders and fields (a value out of range is refused on its field, and the
// figures stay those of the last valid inputs, said so), curves of time and memory against
// the world size, the model size or the bandwidth with the current setting marked, and the
// figures with their formulas, each beside what this recording measured. The inputs live in
// the address (#whatif/k?gpus=...), so a reload or a shared link shows the same case.
(() => {
  const { el } = Classroom;
  const { byName, bytes, micros, maxOf } = Draw;
  const LIB = Model.LIB;
  const STAGES = ["ddp", "zero1", "zero2", "fsdp"];
  const GB = 1e9;  // bandwidths in GB/s (bytes per µs x 1000)
  // Every number input: its range, whether whole, and its slider (a log scale where the
  // values span decades). alpha/beta start at this recording's measured link.
  const FIELDS = {
    params: { label: "parameters Ψ", min: 1e6, max: 1e13, value: LIB.models["qwen2.5-7b"], log: [8, 12] },
    gpus: { label: "GPUs W", min: 2, max: 65536, whole: true, value: 64, log2: [1, 12] },
    bucket: { label: "DDP bucket (MiB)", min: 0.001, max: 1e5, value: 25, log: [0, 3] },
    alpha: { label: "latency α (µs)", min: 0, max: 1e6, value: 5, lin: [0, 100] },
    beta: { label: "bandwidth β (GB/s)", min: 0.001, max: 1e5, value: 50, log: [-1, 3] },
    node: { label: "GPUs per node S", min: 1, max: 1024, whole: true, value: 8, log2: [0, 6] },
    bnode: { label: "β in a node (GB/s)", min: 0.001, max: 1e5, value: 450, log: [0, 3.5] },
    bnet: { label: "β across nodes (GB/s)", min: 0.001, max: 1e5, value: 50, log: [-1, 3] },
    seq: { label: "sequence (tokens)", min: 1, max: 1e7, whole: true, value: 4096, log2: [7, 17] },
    batch: { label: "micro-batch", min: 1, max: 1e5, whole: true, value: 1, log2: [0, 8] },
    tflops: { label: "GPU TFLOP/s achieved", min: 0.001, max: 1e5, value: 400, log: [0, 3.5] },
    gib: { label: "GPU memory (GiB)", min: 0.001, max: 1e6, value: 80, log: [0, 3] },
  };
  const CHOICES = { model: [...Object.keys(LIB.models), "custom"], precision: Object.keys(LIB.precisions),
                    optimizer: Object.keys(LIB.moments), x: ["gpus", "params", "beta"],
                    links: ["cluster", "recording", "typed"] };
  // Links to start from: a GPU cluster's (NVLink in a node, 400 Gb/s InfiniBand across: a
  // ring over many nodes runs at the network's β), or this recording's, as measured.
  const CLUSTER = { alpha: 5, beta: 50, bnode: 450, bnet: 50 };
  const LINKS_TEXT = { cluster: "a GPU cluster (NVLink 450 GB/s, InfiniBand 50 GB/s)",
                       recording: "this recording's (α, β measured)", typed: "as typed" };
  const X_TEXT = { gpus: "GPUs W", params: "parameters Ψ", beta: "bandwidth β (GB/s)" };
  const vals = { model: "qwen2.5-7b", precision: "bf16-mixed", optimizer: "adamw", x: "gpus", links: "cluster" };
  const bad = {};  // key -> why its field's text is refused

  // The first problem with `text` as field `key`'s value, or "" when it is a valid one.
  function refuse(key, text) {
    const f = FIELDS[key], n = Number(text);
    const want = `expected ${f.whole ? "a whole number" : "a number"} from ${f.min} to ${f.max}`;
    if (String(text).trim() === "" || !Number.isFinite(n)) return `${want}, got "${text}"`;
    if (n < f.min || n > f.max || (f.whole && !Number.isInteger(n))) return `${want}, got ${text}`;
    return "";
  }

  // Every figure the panel shows, from the inputs.
  function compute(v) {
    const [p, g] = LIB.precisions[v.precision], K = Model.optimizerK(v.optimizer, v.precision);
    const P = v.params, W = v.gpus, N = g * P, B = v.bucket * 1048576, L = { alpha: v.alpha, beta: v.beta * 1000 };
    const preset = LIB.models[v.model] ? `${v.model}/${v.precision}` : null;
    const memory = Object.fromEntries(STAGES.map((s) => {
      const [w, gr, st] = Model.stageBytes(s, P, W, p, g, K);
      return [s, { weights: w, grads: gr, optimizer: st, buckets: Model.bucketBytes(s, P, g) }];
    }));
    const T = v.seq * v.batch, F = v.tflops * 1e12;
    const fwd = Model.forwardTime(P, T, F), bwd = Model.backwardTime(P, T, F);
    const Ln = { alpha: v.alpha, beta: v.bnode * 1000 }, Lx = { alpha: v.alpha, beta: v.bnet * 1000 };
    return { grad: N, ringBytes: Model.ringBytes(N, W), serverBytes: Model.serverBytes(N, W),
             buckets: Math.ceil(N / B), ringTime: Model.bucketed(L, N, W, B, Model.ringTime),
             serverTime: Model.bucketed(L, N, W, B, Model.serverTime), K, p, g, memory, fwd, bwd,
             step: Model.ddpStep(L, N, W, B, fwd, bwd),
             hsdp: W % v.node ? null : Model.hsdp(Ln, Lx, p * P, N, W, v.node),  // whole nodes only
             fsdpAcross: Model.fsdpAcross(Lx, p * P, N, W),
             units: preset ? LIB.gathered_units[preset] : null,
             activations: preset ? LIB.activations_per_token[preset] * T : null };
  }
  const stageTotal = (m) => m.weights + m.grads + m.optimizer;  // the ZeRO paper's: no buckets

  // What this recording measured, for the "measured" lines (null where not recorded).
  function measured(events) {
    const msgs = byName(events, "traffic message").filter((e) => !e.args.header);
    const span = events.find((e) => e.name === "all-reduce: ring");
    const traffic = msgs.length && span ? {
      S: span.args.bytes, W: maxOf(msgs, (e) => e.pid) + 1,
      ring: msgs.filter((e) => e.args.algorithm === "ring" && e.pid === 0).reduce((s, e) => s + e.args.bytes, 0),
      server: msgs.filter((e) => e.args.algorithm === "parameter server" && e.pid === 0).reduce((s, e) => s + e.args.bytes, 0),
      wall: maxOf(events.filter((e) => e.name === "all-reduce: ring"), (e) => e.dur),
    } : null;
    const mem = byName(events, "memory").filter((e) => e.args.point === "after step");
    const ddp = mem.find((e) => e.args.stage === "ddp");
    const memory = ddp ? { P: ddp.args.params / 4, W: new Set(mem.map((e) => e.pid)).size,
      mean: Object.fromEntries(STAGES.map((s) => { const m = mem.filter((e) => e.args.stage === s);
        return [s, m.reduce((t, e) => t + e.args.params + e.args.grads + e.args.optimizer + e.args.buckets, 0) / m.length]; })) } : null;
    return { traffic, memory };
  }

  // A slider's position for a value, and back.
  const slide = {
    to: (f, x) => (f.log ? Math.log10(x) : f.log2 ? Math.log2(x) : x),
    from: (f, s) => (f.log ? +(10 ** s).toPrecision(3) : f.log2 ? 2 ** Math.round(s) : +s),
  };
  const out = (key, value, text) => el("b", { "data-out": key, "data-value": value, text });
  const NOT_NODES = "– (W is not a whole number of nodes of S)";
  const shown = (v) => (Math.abs(v) >= 1e6 ? v.toExponential().replace("e+", "e") : String(v));  // 7.61e9

  Classroom.scene("whatif", (events, ctx) => {
    const L = Model.link(ctx), seen = measured(events);
    const RECORDED = L && L.beta ? { alpha: +L.alpha.toFixed(1), beta: +(L.beta / 1000).toFixed(2) } : null;
    if (!RECORDED) CHOICES.links = ["cluster", "typed"];
    for (const [k, f] of Object.entries(FIELDS)) vals[k] = f.value;
    const TEXT = ["All four models at once", "1. Gradient bytes, and what each rank sends per step",
                  "2. A step's time: compute, the gradient all-reduce, and their overlap", "3. Memory per GPU, by stage"];
    let refresh = () => {};  // redraws the figures only: a field keeps its focus while typed in

    // The address's inputs, each taken where valid (a link with a bad value opens at the default).
    function fromAddress() {
      for (const k of ["model", "precision", "optimizer", "x", "links"]) {
        const q = Classroom.param(k);
        if (q !== null && CHOICES[k].includes(q)) vals[k] = q;
      }
      for (const k of Object.keys(FIELDS)) {
        const q = Classroom.param(k);
        if (q !== null && !refuse(k, q)) vals[k] = Number(q);
      }
      if (LIB.models[vals.model] && Classroom.param("params") === null) vals.params = LIB.models[vals.model];
    }
    function toAddress() {
      const o = {};
      for (const k of [...Object.keys(FIELDS), "model", "precision", "optimizer", "x", "links"]) o[k] = vals[k];
      Classroom.setParams(o);
    }

    function field(key) {
      const f = FIELDS[key];
      const [lo, hi] = f.log || f.log2 || f.lin;
      const range = el("input", { type: "range", id: `whatif-${key}-slider`, min: lo, max: hi,
                                  step: f.log ? 0.01 : f.log2 ? 1 : (hi - lo) / 200, "aria-label": f.label });
      const box = el("input", { type: "text", inputmode: "decimal", id: `whatif-${key}`, value: shown(vals[key]), "aria-label": f.label });
      const why = el("span", { class: "why", id: `whatif-${key}-why` });
      range.value = slide.to(f, vals[key]);
      const take = (text, fromSlider) => {
        const problem = refuse(key, text);
        box.classList.toggle("invalid", !!problem);
        box.setAttribute("aria-invalid", problem ? "true" : "false");
        why.textContent = problem ? `refused: ${problem}` : "";
        if (problem) bad[key] = `${f.label} ${text}: ${problem}`; else delete bad[key];
        if (!problem) {
          vals[key] = Number(text);
          if (fromSlider) box.value = shown(vals[key]); else range.value = slide.to(f, vals[key]);
          if (key === "params" && vals.model !== "custom" && vals.params !== LIB.models[vals.model]) {
            vals.model = "custom";
            document.getElementById("whatif-model").value = "custom";
          }
          if (["alpha", "beta", "bnode", "bnet"].includes(key) && vals.links !== "typed") {
            vals.links = "typed";
            document.getElementById("whatif-links").value = "typed";
          }
          toAddress();
        }
        refresh();
      };
      box.oninput = () => take(box.value, false);
      range.oninput = () => take(String(slide.from(f, range.value)), true);
      return el("label", { class: "wf" }, el("span", { text: f.label }), box, range, why);
    }
    function choice(key, label) {
      const s = el("select", { id: `whatif-${key}`, "aria-label": label });
      for (const o of CHOICES[key]) {
        s.append(el("option", { value: o, text: key === "x" ? X_TEXT[o] : key === "links" ? LINKS_TEXT[o] : o }));
      }
      s.value = vals[key];
      const set = (k, v) => {  // a field the choice fills in
        vals[k] = v;
        document.getElementById(`whatif-${k}`).value = shown(v);
        document.getElementById(`whatif-${k}-slider`).value = slide.to(FIELDS[k], v);
      };
      s.onchange = () => {
        vals[key] = s.value;
        if (key === "model" && LIB.models[s.value]) set("params", LIB.models[s.value]);
        if (key === "links" && s.value !== "typed") {
          for (const [k, v] of Object.entries(s.value === "cluster" ? CLUSTER : RECORDED)) set(k, v);
        }
        toAddress();
        refresh();
      };
      return el("label", { class: "wf choice" }, el("span", { text: label }), s);
    }

    return {
      count: 4,
      render(k, stage, caption, room) {
        fromAddress();
        caption.textContent = TEXT[k];
        const ins = el("div", { class: "whatif-in" }, choice("model", "model"), choice("precision", "precision"),
          choice("optimizer", "optimizer"), choice("links", "links"), ...Object.keys(FIELDS).map(field),
          choice("x", "curves against"));
        const stale = el("p", { class: "note stale", id: "whatif-stale" });
        const charts = el("div", { class: "split charts" });
        const outs = el("div", { id: "whatif-out", class: "whatif-out" });
        const main = Draw.main(el("div", { class: "whatif" }, ins, stale, charts));
        stage.append(main, outs);
        if (L) stage.append(el("p", { class: "formula", text: `This recording's link${RECORDED ? ' (links: "this recording\'s")' : ""}: ${Model.describe(L)}` }));
        const chartH = Math.max(220, room.h - main.offsetHeight - Draw.smallPx() * 4.5);
        refresh = () => {
          const keys = Object.keys(bad);
          stale.textContent = keys.length ? `Not updated — ${Object.values(bad).join("; ")}. The figures are those ` +
            "of the last valid inputs." : "";
          stale.classList.toggle("off", !keys.length);
          charts.replaceChildren(...curves(k, room.w, chartH));
          outs.replaceChildren(...outputs(k, room));
        };
        stale.textContent = "x";  // reserve its line: the layout does not move when it appears
        refresh();
      },
    };

    // Time and memory against the chosen x, the current setting marked.
    function curves(k, w, h) {
      const xs = vals.x === "gpus" ? [...Array(12).keys()].map((i) => 2 ** (i + 1))
        : vals.x === "params" ? [...Array(41).keys()].map((i) => 10 ** (8 + i / 10))
        : [...Array(41).keys()].map((i) => 10 ** (-1 + i / 10));
      const at = (x) => compute({ ...vals, [vals.x]: x, node: vals.x === "gpus" ? Math.min(x, vals.node) : vals.node });
      const pts = xs.map(at), now = compute(vals);
      const series = (key, name, colour, f, dash, width) => ({ key, name, colour, dash, width, ys: pts.map(f), now: f(now) });
      const time = [
        series("compute", "forward + backward (compute)", "#4c78a8", (c) => c.fwd + c.bwd),
        series("backward", "backward alone: what the all-reduce can hide behind", "#54a24b", (c) => c.bwd, "8 5"),
        series("allreduce", "gradient all-reduce (ring, in buckets)", "#e6a23c", (c) => c.ringTime, null, 7),
        series("step", "DDP step with overlap", "#111", (c) => c.step),
        series("across", "HSDP: the shard's all-reduce across nodes", "#c0392b", (c) => (c.hsdp ? c.hsdp.across : NaN), "3 4"),
      ];
      const mem = [
        ...STAGES.map((s, i) => series(`mem-${s}`, Model.LIB.stage_names[s], ["#111", "#17becf", "#a8a000", "#c51b7d"][i],
                                       (c) => stageTotal(c.memory[s]))),
        ...(now.units !== null ? [series("fsdp-all", "FSDP + gathered units + activations", "#c51b7d",
                                         (c) => stageTotal(c.memory.fsdp) + c.units + c.activations, "8 5")] : []),
      ];
      const cw = Math.floor((w - 16) / 2) - 14, x = { label: X_TEXT[vals.x], fmt: vals.x === "params" ? (v) => `${+(v / 1e9).toPrecision(2)} B` : (v) => `${+v.toPrecision(3)}` };
      const box = (title, id, s, y, hline, cls) => el("div", { class: `plot${cls}` }, el("b", { text: title }),
        Chart.lines({ id, w: cw, h: h - Draw.smallPx() * 1.6 - legendH(s), xs, x, y, at: vals[vals.x], series: s, hline }),
        Draw.legend(s.map((q) => [q.colour, q.name]).concat(hline ? [["#c00", hline.text]] : [])));
      const legendH = (s) => Math.ceil(s.length / 2) * Draw.smallPx() * 1.4;
      return [box("time per step", "time", time, { fmt: micros }, null, k === 2 ? " current" : ""),
              box("memory per GPU (model states; a preset's gathered units and activations)", "memory", mem,
                  { fmt: (b) => bytes(b).replace(".00 ", " ").replace(".0 ", " "), bytes: true }, { y: vals.gib * 2 ** 30, text: `GPU memory ${vals.gib} GiB` }, k === 3 ? " current" : "")];
    }

    function outputs(k, room) {
      const c = compute(vals), t = seen.traffic;
      const b1 = el("div", { class: `out${k === 1 ? " current" : ""}` },
        el("div", {}, "gradients N = g·Ψ = ", out("grad", c.grad, bytes(c.grad))),
        el("div", {}, `ring: each rank sends ${Model.FORMULA.ringBytes} = `, out("ring-bytes", c.ringBytes, bytes(c.ringBytes))),
        el("div", {}, `server: rank 0 sends ${Model.FORMULA.serverBytes} = `, out("server-bytes", c.serverBytes, bytes(c.serverBytes)),
           " (and receives as much)"),
        el("div", {}, `HSDP (S = ${vals.node}): across nodes each rank sends 2(R−1)/R·N/S = `,
           c.hsdp ? out("hsdp-across-bytes", c.hsdp.acrossBytes, bytes(c.hsdp.acrossBytes)) : NOT_NODES,
           "; FSDP over all W: (2p+g)Ψ(W−1)/W = ", out("fsdp-across-bytes", c.fsdpAcross.bytes, bytes(c.fsdpAcross.bytes))),
        el("div", { class: "formula", text: t ? `measured here (W = ${t.W}, N = ${bytes(t.S)}): ring rank 0 sent ` +
          `${bytes(t.ring)} = ${(t.ring / t.S).toFixed(3)}·N (formula ${(2 * (t.W - 1) / t.W).toFixed(3)}·N); ` +
          `server rank 0 sent ${bytes(t.server)} = ${(t.server / t.S).toFixed(3)}·N (formula ${t.W - 1}·N)` : "" }));
      const L = { alpha: vals.alpha, beta: vals.beta * 1000 };
      const b2 = el("div", { class: `out${k === 2 ? " current" : ""}` },
        el("div", {}, "compute: forward 2ΨT/F = ", out("forward", c.fwd, micros(c.fwd)), ", backward 4ΨT/F = ",
           out("backward", c.bwd, micros(c.bwd)), ` (T = ${vals.seq * vals.batch} tokens, F = ${vals.tflops} TFLOP/s; ` +
           "6 FLOPs per parameter per token: Kaplan et al., not a lesson)"),
        el("div", {}, "buckets ⌈N/B⌉ = ", out("buckets", c.buckets, String(c.buckets)),
           "; ring all-reduce, each bucket 2(W−1)·(α + (B/W)/β): ", out("ring-time", c.ringTime, micros(c.ringTime))),
        el("div", {}, "server: each bucket 2(W−1)·(α + B/β), in all ", out("server-time", c.serverTime, micros(c.serverTime))),
        el("div", {}, "DDP step, all buckets but the last hidden behind backward: fwd + max(bwd, all-reduce − last) + last = ",
           out("step", c.step, micros(c.step)), c.ringTime - (c.step - c.fwd - c.bwd) > 0 ?
             ` (${micros(Math.max(0, c.step - c.fwd - c.bwd))} of it exposed)` : ""),
        el("div", {}, `HSDP: in a node (β ${vals.bnode} GB/s) 2·AG(pΨ) + RS(gΨ) = `,
           c.hsdp ? out("hsdp-inside", c.hsdp.inside, micros(c.hsdp.inside)) : NOT_NODES,
           `, across (β ${vals.bnet} GB/s) all-reduce of N/S = `, c.hsdp ? out("hsdp-across", c.hsdp.across, micros(c.hsdp.across)) : NOT_NODES,
           "; FSDP's three rings over all W, across nodes: ", out("fsdp-across", c.fsdpAcross.time, micros(c.fsdpAcross.time))),
        el("div", { class: "formula", text: t && L.beta && Model.link(ctx) ? `measured here: the ring all-reduce of ${bytes(t.S)} ` +
          `on ${t.W} ranks took ${micros(t.wall)} (slowest rank, wall clock, minidp's check before it included); the ` +
          `model with this recording's α, β says ${micros(Model.ringTime(Model.link(ctx), t.S, t.W))} — the gap is ` +
          "explained in the ring scene" : "" }));
      const total = (s) => stageTotal(c.memory[s]) + c.memory[s].buckets + (s === "fsdp" && c.units ? c.units : 0) +
        (c.activations || 0);
      const sc = Draw.scale(maxOf(STAGES, total), Math.max(200, room.w * 0.3));
      const b3 = el("div", { class: `out wide${k === 3 ? " current" : ""}` },
        el("div", { class: "formula", text: `p = ${c.p}, g = ${c.g}, K = ${c.K} bytes per parameter (${LIB.layouts[vals.precision]}); ` +
          "the ZeRO paper's model states first; then what torch adds (DDP's bucket copy, unless gradient_as_bucket_view=True), " +
          "FSDP's gathered units (the planner's units: root, two layers, unsharded gradients) and activations " +
          "(the planner's layer stack, flash attention, no checkpointing) — the last two need a preset's layer shape" }));
      const lw = maxOf(STAGES, (s) => Draw.textWidth(`${LIB.stage_names[s]} ${Model.STAGE_FORMULA[s]}: 000.00 GiB`, Draw.smallPx())) + 16;
      for (const s of STAGES) {
        const m = c.memory[s], paper = stageTotal(m), extra = [];
        if (m.buckets) extra.push(["+ DDP buckets ", out(`buckets-${s}`, m.buckets, bytes(m.buckets))]);
        if (s === "fsdp" && c.units) extra.push(["+ gathered units ", out("fsdp-units", c.units, bytes(c.units))]);
        b3.append(el("div", { class: "mrow" }, el("span", { style: `width:${lw}px` }, `${LIB.stage_names[s]} ${Model.STAGE_FORMULA[s]}: `,
          out(`mem-${s}`, paper, bytes(paper))), Draw.bar([{ cls: "part-params", bytes: m.weights }, { cls: "part-grads", bytes: m.grads },
            { cls: "part-optimizer", bytes: m.optimizer }, { cls: "part-buckets", bytes: m.buckets },
            { cls: "part-full", bytes: s === "fsdp" && c.units ? c.units : 0 }, { cls: "part-activations", bytes: c.activations || 0 }], sc),
          el("span", { class: "note" }, ...extra.flat())));
      }
      b3.append(el("div", {}, "activations (every stage: data parallelism does not shard them) ",
        c.activations === null ? "– (a custom model has no layer shape)" : out("activations", c.activations, bytes(c.activations))));
      b3.append(Draw.legend([["part-params", "weights"], ["part-grads", "gradients"], ["part-optimizer", "optimizer state"],
                             ["part-buckets", "DDP buckets"], ["part-full", "gathered units"], ["part-activations", "activations"]]));
      const mm = seen.memory;
      if (mm) {
        const f = (s) => { const [w, gr, st] = Model.stageBytes(s, mm.P, mm.W, 4, 4, 8); return w + gr + st + Model.bucketBytes(s, mm.P, 4); };
        b3.append(el("div", { class: "formula", text: `measured here (Ψ = ${mm.P}, W = ${mm.W}, fp32 AdamW; mean per rank ` +
          `after the step vs formula with DDP's buckets): ${STAGES.map((s) => `${s} ${bytes(mm.mean[s])} vs ${bytes(f(s))}`).join(", ")} ` +
          "(the rest: AdamW's step counters, ZeRO-2's padding)" }));
      }
      return [b1, b2, b3];
    }
  });
})();
