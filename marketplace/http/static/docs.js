// Swagger UI over this server's OpenAPI document; every asset comes from this server.

// The search box: Swagger UI's own filter keeps the tags whose name contains the text; this one
// keeps the operations whose path, method, summary, operation id or tag contains every word
// typed, in any case ("chat", "post chat", "sendDirectMessage", "/v1/messages/dm").
function operationText(tag, operation) {
  const op = operation.get("operation");
  return [
    tag,
    operation.get("method"),
    operation.get("path"),
    op ? op.get("summary") : "",
    op ? op.get("operationId") : "",
  ]
    .join(" ")
    .toLowerCase();
}

function searchOperations(taggedOps, phrase) {
  const words = String(phrase).toLowerCase().split(/\s+/).filter(Boolean);
  if (words.length === 0) {
    return taggedOps;
  }
  return taggedOps
    .map(function (tagObj, tag) {
      const found = tagObj.get("operations").filter(function (operation) {
        const text = operationText(tag, operation);
        return words.every(function (word) {
          return text.indexOf(word) !== -1;
        });
      });
      return tagObj.set("operations", found);
    })
    .filter(function (tagObj) {
      return tagObj.get("operations").size > 0;
    });
}

const SEARCH_PLACEHOLDER = "Search paths, summaries, operation ids, tags";

// The box is Swagger UI's; only its hint changes (React leaves an attribute it does not change).
function labelSearchBox() {
  const input = document.querySelector(".operation-filter-input");
  if (input && input.placeholder !== SEARCH_PLACEHOLDER) {
    input.placeholder = SEARCH_PLACEHOLDER;
    input.setAttribute("aria-label", SEARCH_PLACEHOLDER);
  }
}

window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({
    url: "/v1/openapi.json",
    dom_id: "#swagger-ui",
    presets: [SwaggerUIBundle.presets.apis],
    plugins: [{ fn: { opsFilter: searchOperations } }],
    layout: "BaseLayout",
    deepLinking: true,
    persistAuthorization: true,
    displayOperationId: true,
    displayRequestDuration: true,
    showCommonExtensions: true,
    filter: true,
    docExpansion: "list",
    defaultModelsExpandDepth: 0,
    defaultModelExpandDepth: 3,
    // The hosted validator would send the document to a third party: off.
    validatorUrl: null,
    onComplete: labelSearchBox,
  });
  new MutationObserver(labelSearchBox).observe(document.getElementById("swagger-ui"), {
    childList: true,
    subtree: true,
  });
});
