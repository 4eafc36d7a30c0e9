// Calls to the app's JSON API. In token mode the page's first load carries ?token=: the app answers it
// with an HttpOnly cookie, so the token is dropped from the address bar here and no link carries it.

if (new URLSearchParams(location.search).has("token")) {
  const url = new URL(location.href);
  url.searchParams.delete("token");
  history.replaceState(history.state, "", url.pathname + url.search + url.hash);
}

// Kept for modules that build links: the cookie authenticates them, so the URL stays as it is.
export function withToken(url) {
  return url;
}

async function call(method, url, body, type) {
  const headers = body === undefined ? {} : { "Content-Type": type };
  const response = await fetch(url, { method, headers, body, credentials: "same-origin" });
  const data = (response.headers.get("content-type") || "").includes("json") ? await response.json() : await response.text();
  if (!response.ok) {
    const error = new Error((data && data.error) || response.statusText);
    error.data = data;
    error.status = response.status;
    throw error;
  }
  return data;
}

// POST JSON and hand each piece of a streamed text reply to `onPiece` as it arrives.
async function stream(url, data, onPiece) {
  const response = await fetch(url, {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(data), credentials: "same-origin",
  });
  if (!response.ok) {
    const body = await response.json().catch(() => ({}));
    throw Object.assign(new Error(body.error || response.statusText), { status: response.status });
  }
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    if (value) onPiece(value);
  }
}

export const api = {
  get: (url) => call("GET", url),
  post: (url, data) => call("POST", url, data === undefined ? undefined : JSON.stringify(data), "application/json"),
  postText: (url, text) => call("POST", url, text, "text/plain; charset=utf-8"),
  putText: (url, text) => call("PUT", url, text, "text/plain; charset=utf-8"),
  stream,
};

// The line at the top right. `key` names what it is about, so that thing can clear it (clearNotice).
let noticeKey = null;

export function notice(message, isError = false, key = null) {
  const el = document.getElementById("notice");
  el.textContent = message;
  el.classList.toggle("error", isError);
  noticeKey = key;
}

export function clearNotice(key) {
  if (noticeKey === key) notice("");
}
