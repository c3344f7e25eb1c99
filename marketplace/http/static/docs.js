// Swagger UI over this server's OpenAPI document; every asset comes from this server.
window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({
    url: "/v1/openapi.json",
    dom_id: "#swagger-ui",
    presets: [SwaggerUIBundle.presets.apis],
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
  });
});
