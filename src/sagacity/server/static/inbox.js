// Live updates for the approval inbox. The server-sent events stream says when what the
// page shows has changed: the queue reloads itself (unless someone is typing in it), other
// pages show a banner, so a decision in progress is never swapped under the reader.
(function () {
  "use strict";
  var body = document.body;
  var url = body.getAttribute("data-events");
  if (!url || !window.EventSource) {
    return;
  }
  var source = new EventSource(url);
  source.addEventListener("changed", function () {
    var typing = document.activeElement && /^(INPUT|TEXTAREA)$/.test(document.activeElement.tagName);
    if (body.getAttribute("data-page") === "inbox" && !typing) {
      window.location.reload();
      return;
    }
    var banner = document.getElementById("live");
    if (banner) {
      banner.hidden = false;
    }
    source.close();
  });
})();
