// Calls to the app's JSON API; the token (when the app was started with one) rides on every request.

const token = new URLSearchParams(location.search).get("token");

export function withToken(url) {
  if (!token) return url;
  return url + (url.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(token);
}

async function call(method, url, body, type) {
  const headers = {};
  if (token) headers.Authorization = "Bearer " + token;
  if (body !== undefined) headers["Content-Type"] = type;
  const response = await fetch(url, { method, headers, body });
  const data = (response.headers.get("content-type") || "").includes("json") ? await response.json() : await response.text();
  if (!response.ok) {
    const error = new Error((data && data.error) || response.statusText);
    error.data = data;
    error.status = response.status;
    throw error;
  }
  return data;
}

export const api = {
  get: (url) => call("GET", url),
  post: (url, data) => call("POST", url, data === undefined ? undefined : JSON.stringify(data), "application/json"),
  postText: (url, text) => call("POST", url, text, "text/plain; charset=utf-8"),
  putText: (url, text) => call("PUT", url, text, "text/plain; charset=utf-8"),
};

export function notice(message, isError = false) {
  const el = document.getElementById("notice");
  el.textContent = message;
  el.classList.toggle("error", isError);
}
