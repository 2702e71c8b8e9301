// Live tail of one topic over the console's WebSocket stream (frontend/tail.py).
// Pause stops acknowledging: the server then stops after its window, so a paused page
// holds a bounded number of records; Resume shows and acknowledges them.
// The partition and the filters are sent with the subscription: the server filters
// (the message browser's rules), so only matching records count against the window.
(function () {
  "use strict";
  const MAX_ROWS = 200;
  const LINE_CHARS = 120;
  const section = document.getElementById("tail");
  if (!section) return;
  const startButton = document.getElementById("tail-start");
  const pauseButton = document.getElementById("tail-pause");
  const status = document.getElementById("tail-status");
  const partitionChoice = document.getElementById("id_tail_partition");
  const keyFilter = document.getElementById("id_tail_key");
  const textFilter = document.getElementById("id_tail_text");
  const tbody = section.querySelector("tbody");
  let socket = null;
  let paused = false;
  let held = [];
  let filtered = false;

  function say(text) { status.textContent = text; }

  function cell(row, text, className) {
    const td = document.createElement("td");
    td.textContent = text;
    if (className) td.className = className;
    row.appendChild(td);
    return td;
  }

  function shown(value, format) {
    if (value === null || value === undefined) return ["null", "null"];
    if (format === "binary") return [value, "base64"];
    return [String(value), "text"];
  }

  function line(text) {
    const one = text.replace(/\s+/g, " ");
    return one.length > LINE_CHARS ? one.slice(0, LINE_CHARS - 1) + "…" : one;
  }

  function detailItem(list, name, text, className) {
    const dt = document.createElement("dt");
    dt.textContent = name;
    const dd = document.createElement("dd");
    const pre = document.createElement("pre");
    pre.textContent = text;
    if (className) pre.className = className;
    dd.appendChild(pre);
    list.appendChild(dt);
    list.appendChild(dd);
  }

  function rows(r) {
    const id = "tail-record-" + r.partition + "-" + r.offset;
    const key = shown(r.key, r.key_format);
    const value = shown(r.value, r.value_format);
    const headers = r.headers || [];
    const row = document.createElement("tr");
    row.className = "record";
    const button = document.createElement("button");
    button.type = "button";
    button.className = "expand";
    button.textContent = "▸";
    button.setAttribute("aria-expanded", "false");
    button.setAttribute("aria-controls", id);
    button.setAttribute("aria-label", "Show record " + r.partition + "/" + r.offset + " in full");
    cell(row, "").appendChild(button);
    cell(row, String(r.partition));
    cell(row, String(r.offset));
    cell(row, new Date(r.timestamp).toISOString().replace("T", " ").slice(0, 23));
    cell(row, line(key[0]), "line " + key[1]);
    cell(row, line(value[0]), "line " + value[1]);
    cell(row, String(headers.length));
    const detail = document.createElement("tr");
    detail.className = "detail";
    detail.id = id;
    detail.hidden = true;
    const td = document.createElement("td");
    td.colSpan = 7;
    const list = document.createElement("dl");
    list.className = "record";
    detailItem(list, "Key", key[0], key[1]);
    detailItem(list, "Value", value[0], value[1]);
    detailItem(list, "Headers", headers.length ? headers.map(function (h) {
      return h.key + ": " + (h.value === null ? "null" : h.value);
    }).join("\n") : "–");
    detailItem(list, "Timestamp", r.timestamp + " (" + r.timestamp_type.replace(/_/g, " ") + ")");
    td.appendChild(list);
    detail.appendChild(td);
    return [row, detail];
  }

  function show(records) {
    const last = {};
    for (const r of records) {
      const pair = rows(r);
      tbody.insertBefore(pair[1], tbody.firstChild);
      tbody.insertBefore(pair[0], pair[1]);
      last[r.partition] = r.offset;
    }
    while (tbody.querySelectorAll("tr.record").length > MAX_ROWS) {
      tbody.deleteRow(tbody.rows.length - 1);
      tbody.deleteRow(tbody.rows.length - 1);
    }
    const offsets = Object.keys(last).map(function (p) {
      return { topic: section.dataset.topic, partition: Number(p), offset: last[p] };
    });
    if (offsets.length && socket) socket.send(JSON.stringify({ type: "ack", offsets: offsets }));
  }

  function live() {
    say(filtered ? "Live: new records that match appear at the top." : "Live: new records appear at the top.");
  }

  function lockChoices(locked) {
    partitionChoice.disabled = locked;
    keyFilter.disabled = locked;
    textFilter.disabled = locked;
  }

  function stop(text) {
    if (socket) { const s = socket; socket = null; s.close(); }
    startButton.textContent = "Start";
    pauseButton.disabled = true;
    paused = false;
    pauseButton.textContent = "Pause";
    pauseButton.setAttribute("aria-pressed", "false");
    lockChoices(false);
    say(text);
  }

  function subscription() {
    const frame = {
      type: "subscribe", from: "latest", window: 500,
      key_format: "string", value_format: "string", header_format: "string",
    };
    if (partitionChoice.value === "all") frame.topics = [section.dataset.topic];
    else frame.partitions = [{ topic: section.dataset.topic, partition: Number(partitionChoice.value) }];
    filtered = Boolean(keyFilter.value || textFilter.value);
    if (filtered) frame.filter = { key: keyFilter.value, text: textFilter.value };
    return frame;
  }

  startButton.addEventListener("click", function () {
    if (socket) { stop("Stopped."); return; }
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    socket = new WebSocket(scheme + "//" + location.host + section.dataset.url);
    held = [];
    say("Connecting…");
    startButton.textContent = "Stop";
    lockChoices(true);
    socket.addEventListener("message", function (event) {
      const frame = JSON.parse(event.data);
      if (frame.type === "authenticated") {
        socket.send(JSON.stringify(subscription()));
      } else if (frame.type === "subscribed") {
        pauseButton.disabled = false;
        live();
      } else if (frame.type === "records") {
        if (paused) { held = held.concat(frame.records); say("Paused: " + held.length + " new record(s) waiting."); }
        else show(frame.records);
      } else if (frame.type === "error") {
        say("Error: " + frame.message);
      }
    });
    socket.addEventListener("close", function () { if (socket) stop("Disconnected."); });
  });

  pauseButton.addEventListener("click", function () {
    paused = !paused;
    pauseButton.textContent = paused ? "Resume" : "Pause";
    pauseButton.setAttribute("aria-pressed", paused ? "true" : "false");
    if (paused) { say("Paused."); return; }
    const waiting = held;
    held = [];
    if (waiting.length) show(waiting);
    live();
  });
})();
