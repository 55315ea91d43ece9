// Shared by the player pages (inlined by play/server.py's page_app): the WebSocket with the page's
// token, and the binary frame packing of play/server.py's pack_frame.
function openSocket(onText, onBinary, onClose) {
  const token = new URLSearchParams(location.search).get("token") || "";
  const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws?token=" + encodeURIComponent(token);
  const ws = new WebSocket(url);
  ws.binaryType = "arraybuffer";
  ws.onmessage = (ev) => typeof ev.data === "string" ? onText(JSON.parse(ev.data)) : onBinary(ev.data);
  ws.onclose = onClose;
  return ws;
}

// b"GNF1", a uint32 header length, the JSON header, then one image per header.views entry.
async function unpackFrame(buf) {
  const n = new DataView(buf).getUint32(4, true);
  const header = JSON.parse(new TextDecoder().decode(new Uint8Array(buf, 8, n)));
  let at = 8 + n;
  const bitmaps = [];
  for (const v of header.views) {
    bitmaps.push(await createImageBitmap(new Blob([new Uint8Array(buf, at, v.size)], { type: v.mime })));
    at += v.size;
  }
  return { header, bitmaps };
}
