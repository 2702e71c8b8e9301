// Live tail of one topic over the console's WebSocket stream (frontend/tail.py).
// Pause stops acknowledging: the server then stops after its window, so a paused page
// holds a bounded number of records; Resume shows and acknowledges them.
(function () {
  "use strict";
  const MAX_ROWS = 200;
  const section = document.getElementById("tail");
  if (!section) return;
  const startButton = document.getElementById("tail-start");
  const pauseButton = document.getElementById("tail-pause");
  const status = document.getElementById("tail-status");
  const tbody = section.querySelector("tbody");
  let socket = null;
  let paused = false;
  let held = [];

  function say(text) { status.textContent = text; }

  function cell(row, text, className) {
    const td = document.createElement("td");
    if (className) {
      const pre = document.createElement("pre");
      pre.className = className;
      pre.textContent = text;
      td.appendChild(pre);
    } else {
      td.textContent = text;
    }
    row.appendChild(td);
  }

  function shown(value, format) {
    if (value === null || value === undefined) return ["null", "null"];
    if (format === "binary") return [value, "base64"];
    return [String(value), "text"];
  }

  function show(records) {
    const last = {};
    for (const r of records) {
      const row = document.createElement("tr");
      cell(row, String(r.partition));
      cell(row, String(r.offset));
      cell(row, new Date(r.timestamp).toISOString().replace("T", " ").slice(0, 23));
      const key = shown(r.key, r.key_format);
      cell(row, key[0], key[1]);
      const value = shown(r.value, r.value_format);
      cell(row, value[0], value[1]);
      tbody.insertBefore(row, tbody.firstChild);
      last[r.partition] = r.offset;
    }
    while (tbody.rows.length > MAX_ROWS) tbody.deleteRow(tbody.rows.length - 1);
    const offsets = Object.keys(last).map(function (p) {
      return { topic: section.dataset.topic, partition: Number(p), offset: last[p] };
    });
    if (offsets.length && socket) socket.send(JSON.stringify({ type: "ack", offsets: offsets }));
  }

  function stop(text) {
    if (socket) { const s = socket; socket = null; s.close(); }
    startButton.textContent = "Start";
    pauseButton.disabled = true;
    paused = false;
    pauseButton.textContent = "Pause";
    pauseButton.setAttribute("aria-pressed", "false");
    say(text);
  }

  startButton.addEventListener("click", function () {
    if (socket) { stop("Stopped."); return; }
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    socket = new WebSocket(scheme + "//" + location.host + section.dataset.url);
    held = [];
    say("Connecting…");
    startButton.textContent = "Stop";
    socket.addEventListener("message", function (event) {
      const frame = JSON.parse(event.data);
      if (frame.type === "authenticated") {
        socket.send(JSON.stringify({
          type: "subscribe", topics: [section.dataset.topic], from: "latest", window: 500,
          key_format: "string", value_format: "string",
        }));
      } else if (frame.type === "subscribed") {
        pauseButton.disabled = false;
        say("Live: new records appear at the top.");
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
    say("Live: new records appear at the top.");
  });
})();
