// A copy button on every code block (sphinx-copybutton is not a dependency: these few lines do its job).
document.addEventListener("DOMContentLoaded", () => {
  for (const block of document.querySelectorAll("div.highlight")) {
    const button = document.createElement("button");
    button.className = "effitrain-copy btn";
    button.type = "button";
    button.textContent = "⧉";
    button.title = document.documentElement.lang.startsWith("pt") ? "Copiar" : "Copy";
    button.addEventListener("click", async () => {
      await navigator.clipboard.writeText(block.querySelector("pre").innerText);
      button.textContent = "✓";
      setTimeout(() => { button.textContent = "⧉"; }, 1500);
    });
    block.prepend(button);
  }
});
